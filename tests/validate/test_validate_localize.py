"""Planted bugs, one per test, each caught and localized to its step, module (or parameter) and rank.

Every test runs a correct program against a copy with one mistake planted in it, through the CLI
with --localize, natively (torch 2.13) so that no old stack is needed: the correct program stands
in for the original, as a validated migration does. Each runs the programs twice (the comparison,
then the rerun of the first diverging step), so they are marked slow.
"""

from __future__ import annotations

import pytest

from .conftest import PROGRAMS, items_by_key, plant, validate_json

pytestmark = pytest.mark.slow
TRAIN = PROGRAMS / "tiny_blocks_train.py"


def localized(capsys, wrong, *argv):
    code, document = validate_json(capsys, str(TRAIN), str(wrong), "--localize", *argv)
    assert code == 1 and document["verdict"] == "diverge", document.get("errors")
    (found,) = document["localization"]
    return document, found


def test_learning_rate_times_ten_is_the_update_after_step_0(capsys, tmp_path):
    wrong = plant(TRAIN, tmp_path / "lr.py", "lr=args.lr)", "lr=args.lr * 10)")
    document, found = localized(capsys, wrong)
    items = items_by_key(document)
    assert items["losses"]["first_step"] == 1  # step 0 runs before any update
    assert (found["step"], found["finding"], found["where"]) == (1, "update", "embed.weight")
    assert found["headline"].startswith(
        "the optimizer step after step 0: the gradients agree, the updated parameters do not"
    )


def test_a_transposed_weight_is_its_layer(capsys, tmp_path):
    wrong = plant(
        TRAIN,
        tmp_path / "transposed.py",
        "        self.head = nn.Linear(width, classes)\n",
        "        self.head = nn.Linear(width, classes)\n"
        "        second = self.blocks[1]\n"
        "        second.forward = lambda x: x + torch.relu(\n"
        "            nn.functional.linear(second.norm(x), second.fc.weight.t(), second.fc.bias)\n"
        "        )\n",
    )
    _, found = localized(capsys, wrong)
    assert (found["step"], found["finding"], found["where"]) == (0, "forward", "blocks.1")
    rows = {row["name"]: row["verdict"] for row in found["modules"]}
    assert rows["embed"] == rows["blocks.0"] == rows["blocks.1.norm"] == "match"
    assert any("run in only one program" in note for note in found["notes"])  # blocks.1.fc


def test_a_changed_layernorm_epsilon_is_that_layernorm(capsys, tmp_path):
    wrong = plant(
        TRAIN,
        tmp_path / "eps.py",
        "        self.head = nn.Linear(width, classes)\n",
        "        self.head = nn.Linear(width, classes)\n        self.blocks[0].norm.eps = 1e-5\n",
    )
    _, found = localized(capsys, wrong)
    assert (found["step"], found["finding"], found["where"]) == (0, "forward", "blocks.0.norm")
    assert "(LayerNorm)" in found["headline"]


def test_a_bf16_cast_in_the_wrong_place_is_the_layer_that_reads_it(capsys, tmp_path):
    wrong = plant(
        TRAIN,
        tmp_path / "cast.py",
        "torch.relu(self.fc(self.norm(x)))",
        "torch.relu(self.fc(self.norm(x).to(torch.bfloat16).float()))",
    )
    _, found = localized(capsys, wrong)
    assert (found["step"], found["finding"], found["where"]) == (0, "forward", "blocks.0.fc")
    first = next(row for row in found["modules"] if row["name"] == "blocks.0.fc")
    assert first["stats"]["norm_rel"] > 1e-4  # bf16 rounding, where float32 agrees to ~1e-7


def test_a_dropped_all_reduce_on_one_rank_is_that_rank_between_backward_and_step(
    capsys, tmp_path, migrated_examples
):
    good = migrated_examples / "xla_spawn_multiprocess.py"
    wrong = plant(
        good,
        tmp_path / "one_rank.py",
        "dist.all_reduce(param.grad)",
        "dist.all_reduce(param.grad if dist.get_rank() == 0 else param.grad.clone())",
    )
    code, document = validate_json(
        capsys, str(good), str(wrong), "--original-nproc", "2", "--nproc", "2", "--localize",
        "--", "--steps", "3",
    )  # fmt: skip
    assert code == 1
    assert document["first_diverging_rank"] == {
        "rank": 1,
        "step": 0,
        "item": "gradients before the first step (4 tensors) [rank 1]",
    }
    ranks = {r["rank"]: r["step"] for r in document["ranks"]}
    assert ranks[0] is not None and ranks[0] > 0  # rank 0 follows once rank 1's updates feed in
    found = {f["rank"]: f for f in document["localization"]}
    assert found[1]["finding"] == "gradient sync" and found[1]["step"] == 0
    assert "gradient all-reduce" in found[1]["headline"]
    assert found[0]["finding"] == "none"


def test_a_wrong_attention_mask_in_generation_is_its_padded_row(capsys, tmp_path):
    source = PROGRAMS / "tiny_generate_padded.py"
    wrong = plant(
        source,
        tmp_path / "mask.py",
        "attention_mask=mask,",
        "attention_mask=torch.ones_like(prompt),",
    )
    code, document = validate_json(capsys, str(source), str(wrong), "--", "--new-tokens", "4")
    item = items_by_key(document)["generate/0"]
    assert code == 1 and item["verdict"] == "diverge"
    assert item["title"] == "generate() call 0: teacher-forced logits"
    assert "teacher-forced: logits out of tolerance from position 0, rows 1 " in item["detail"]
    assert document["passes"][-1].startswith("rerun: original, migrated again, with generate()")
