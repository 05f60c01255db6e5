"""`validate` end to end on programs that need only this (native) Python: several processes, compile
behaviour, generate(), dropout. Each test runs both programs, so they are marked slow."""

from __future__ import annotations

import json

import pytest

from neuron_migrate.validate.command import main

from .conftest import PROGRAMS, items_by_key, plant, validate_json

pytestmark = pytest.mark.slow


def test_dropped_gradient_all_reduce_in_a_2_process_run(migrated_examples, tmp_path, capsys):
    # XLA:CPU runs no collectives, so the data-parallel check is the migrated program against
    # itself: two ranks train on different shards and must end with the same parameters.
    good = migrated_examples / "xla_spawn_multiprocess.py"
    wrong = plant(
        good,
        tmp_path / "no_allreduce.py",
        "        average_gradients(optimizer)\n",
        "        pass  # planted\n",
    )
    report, picture = tmp_path / "report.json", tmp_path / "losses.png"
    code = main(
        [
            "validate",
            str(good),
            str(wrong),
            "--original-nproc",
            "2",
            "--nproc",
            "2",
            "--json",
            str(report),
            "--plot",
            str(picture),
            "--",
            "--steps",
            "3",
        ]
    )
    table = capsys.readouterr().out
    assert code == 1
    items = items_by_key(json.loads(report.read_text()))
    assert items["replicas/original"]["verdict"] == "match"
    assert items["replicas/migrated"]["verdict"] == "diverge"
    assert (
        "not averaged across ranks (a missing all-reduce?)" in items["replicas/migrated"]["detail"]
    )
    assert items["losses@rank0"]["entries"][0]["verdict"] == "match"  # same start, then apart
    assert items["losses@rank0"]["verdict"] == "diverge"
    assert "migrated: ranks agree on final parameters (2 ranks)    diverge" in table
    # Gradients are recorded as the optimizer steps, after the sync: unaveraged, they part from
    # the start on both ranks (the lower rank is named first on a tie), before the losses do.
    assert (
        "ranks: rank 0 diverges first, at step 0 (gradients before the first step (4 tensors) "
        "[rank 0]); rank 1 from step 0"
    ) in table
    # What ran: both ranks, through gloo, and the all-reduce the wrong program no longer makes.
    assert "ran on cpu; process group cpu:gloo; torch.compile none; 2 processes recorded" in table
    assert "collectives torch.distributed.all_reduce x" in table
    assert "torchrun, 2 processes" in table and table.rstrip().endswith(
        "result: DIVERGE (4 items match, 7 diverge), judged by the tolerances"
    )
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_padding_shows_fewer_compiled_graphs(capsys):
    code = main(
        [
            "validate",
            "--compile-stats",
            str(PROGRAMS / "varlen_train.py"),
            str(PROGRAMS / "varlen_train_padded.py"),
            "--",
            "--steps",
            "6",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "original: 4 neuron (stand-in) graphs for 6 steps, 3 recompiles, 0 graph breaks" in out
    assert (
        "recompile x1: forward (varlen_train.py:15): tensor 'mask' size mismatch at index 1. expected 5, actual 7"
        in out
    )
    assert "migrated: 1 neuron (stand-in) graph for 6 steps, 0 recompiles, 0 graph breaks" in out
    assert "=> original: 4 graphs; migrated: 1" in out


def test_generate_and_forward_outputs_are_compared(capsys):
    code, document = validate_json(
        capsys,
        str(PROGRAMS / "tiny_generate.py"),
        str(PROGRAMS / "tiny_generate_reseeded.py"),
        "--forward",
        "LlamaForCausalLM",
        "--",
        "--new-tokens",
        "4",
    )
    items = items_by_key(document)
    assert code == 1 and document["verdict"] == "diverge"
    assert (
        items["forward"]["verdict"] == "diverge" and items["forward"]["detail"] == "worst: logits"
    )
    assert items["generate/0"]["verdict"] == "diverge"
    # The tokens part, so both programs ran again along the original's tokens.
    assert items["generate/0"]["title"] == "generate() call 0: teacher-forced logits"
    assert items["generate/0"]["detail"].startswith("row 0: first divergence at token")
    assert "teacher-forced: first divergent position" in items["generate/0"]["detail"]
    assert items["precision"]["detail"] == "original: params float32; migrated: params float32"


def test_no_dropout_makes_a_dropout_program_deterministic(capsys):
    with_dropout, without = (
        str(PROGRAMS / "dropout_train.py"),
        str(PROGRAMS / "dropout_free_train.py"),
    )
    code, document = validate_json(capsys, with_dropout, without, "--seed", "3", "--native-random")
    assert code == 1
    assert any(
        "applies dropout (5 calls) on its own generator (--native-random)" in n
        for n in document["notes"]
    )
    code, document = validate_json(capsys, with_dropout, without, "--seed", "3", "--no-dropout")
    assert code == 0 and document["verdict"] == "match"
    assert not any("dropout" in n for n in document["notes"])


def test_random_draws_in_bf16_are_the_float32_draws_rounded(capsys, tmp_path):
    # torch draws other numbers in bfloat16 than in float32 (on the CPU, for most sizes past 16
    # elements); the old stack (XLA_USE_BF16) drew in float32 and stored bf16. With the draws made
    # on the host both forms give the same numbers.
    bf16_draw = tmp_path / "bf16_draw.py"
    bf16_draw.write_text(
        "import torch\n"
        "w = torch.nn.Parameter(torch.randn(1000, dtype=torch.bfloat16))\n"
        "torch.optim.SGD([w], lr=0.1).step()\n"
    )
    float32_draw = tmp_path / "float32_draw.py"
    float32_draw.write_text(
        "import torch\n"
        "w = torch.nn.Parameter(torch.randn(1000).bfloat16())\n"
        "torch.optim.SGD([w], lr=0.1).step()\n"
    )
    code, document = validate_json(capsys, str(float32_draw), str(bf16_draw))
    assert (code, document["verdict"]) == (0, "match"), document["items"]
    code, document = validate_json(capsys, str(float32_draw), str(bf16_draw), "--native-random")
    assert code == 1 and items_by_key(document)["parameters"]["verdict"] == "diverge"


def test_an_optimizer_stepped_inside_another_is_part_of_its_step(capsys):
    # ZeRO-1 steps a local optimizer over shards (copies) of the parameters: one step, whose
    # parameters are the module's, as with the plain optimizer it replaces.
    plain = str(PROGRAMS / "sharded_optimizer_train.py")
    sharded = str(PROGRAMS / "sharded_optimizer_train_zero.py")
    code, document = validate_json(capsys, plain, sharded)
    assert (code, document["verdict"]) == (0, "match"), document["items"]
    items = items_by_key(document)
    assert items["parameters"]["title"] == "final parameters (4 tensors)"
    assert [run["ranks"][0]["optimizer_steps"] for run in document["runs"]] == [4, 4]


def test_float32_rounding_past_the_tolerance_is_settled_by_a_float64_run(capsys):
    # The same loss added up in another order: float32 rounding moves it past the float32
    # tolerance (a few 1e-4 relative). validate runs the original again in float64 and judges
    # what the tolerance left against that floor; a real difference would still diverge.
    original, migrated = (
        str(PROGRAMS / "cancelling_loss_train.py"),
        str(PROGRAMS / "cancelling_loss_flipped.py"),
    )
    code, plain = validate_json(capsys, original, migrated, "--noise-floor", "off")
    assert code == 1 and items_by_key(plain)["losses"]["verdict"] == "diverge"
    code, document = validate_json(capsys, original, migrated)
    assert code == 0 and document["verdict"] == "match", document["items"]
    assert document["noise_floor"]["width"] == "float64"
    assert document["noise_floor"]["changed"] == {"module widened": 1, "input widened": 4}
    losses = items_by_key(document)["losses"]
    assert "or float64 noise floor" in losses["rule"] and losses["ratio"]["r"] < 2
    assert any("noise floor of a float64 run" in n for n in document["notes"])
