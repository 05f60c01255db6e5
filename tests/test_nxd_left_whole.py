"""An NxD program that cannot move as a whole is given back as it was, every blocker marked.

Its NxD runs on torch_xla: a file whose device, step or launch code moved while its NxD stayed
would run on neither stack.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from neuron_migrate.cli import main
from neuron_migrate.rewrite.engine import rewrite_source
from neuron_migrate.rewrite.report import KEPT

SCRIPT = """\
import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
from neuronx_distributed.parallel_layers import layers, parallel_state


def main(flags):
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=flags.tp)
    device = xm.xla_device()
    model = layers.ColumnParallelLinear(8, 8, gather_output=False, skip_bias_add=True).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        model(torch.ones(2, 8, device=device))[0].sum().backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
        optimizer.step()
        xm.mark_step()
"""

MODEL = """\
from neuronx_distributed.parallel_layers import layers
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.up = layers.ColumnParallelLinear(hidden, hidden, gather_output=False, pad=True)
"""

PROGRAM_SCRIPT = """\
import torch.distributed as dist
import torch_xla.core.xla_model as xm
from neuronx_distributed.parallel_layers import parallel_state

from modeling import Block


def main():
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
    model = Block(8).to(xm.xla_device())
    xm.mark_step()
"""

_TODO = re.compile(r"^[ \t]*# TODO\(neuron-migrate NM025\): .*\n", re.M)


def _without_todos(text: str) -> str:
    return _TODO.sub("", text)


def _todo_above(text: str, statement: str) -> str:
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip() == statement)
    assert "TODO(neuron-migrate NM025)" in lines[index - 1], f"no TODO above {statement!r}"
    return lines[index - 1]


def test_a_file_left_keeps_its_torch_xla_and_marks_every_blocker() -> None:
    result = rewrite_source(SCRIPT, "train.py")
    assert result.kept_as_it_was is not None
    assert _without_todos(result.migrated) == SCRIPT  # torch_xla included: nothing half-migrated
    assert "skip_bias_add=True" in _todo_above(result.migrated, "model = layers.ColumnParallelLinear(8, 8, gather_output=False, skip_bias_add=True).to(device)")
    assert "`clip_grad_value_`" in _todo_above(result.migrated, "torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)")
    header = _todo_above(result.migrated, "from neuronx_distributed.parallel_layers import layers, parallel_state")
    assert "left as it was, torch_xla too" in header and "the 2 lines marked NM025 below" in header
    assert not result.changes


def test_a_second_run_changes_nothing() -> None:
    once = rewrite_source(SCRIPT, "train.py").migrated
    again = rewrite_source(once, "train.py")
    assert again.migrated == once and again.kept_as_it_was is not None


def test_nothing_blocks_the_file_left_whole_advice_moved_into_its_blocker() -> None:
    text = "from neuronx_distributed.kernels.flash_attn import nki_flash_attn_func\nfrom neuronx_distributed.parallel_layers import parallel_state\n\n\ndef attention(q, k, v):\n    return nki_flash_attn_func(q, k, v)\n"
    result = rewrite_source(text, "kernels.py")
    assert _without_todos(result.migrated) == text
    assert "F.scaled_dot_product_attention" in _todo_above(result.migrated, "return nki_flash_attn_func(q, k, v)")
    assert "set up in another file" in result.migrated


@pytest.fixture
def program(tmp_path: Path) -> Path:
    (tmp_path / "modeling.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(PROGRAM_SCRIPT)
    return tmp_path


def test_a_program_is_left_as_a_whole_when_one_of_its_files_is(program: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    report_file = tmp_path_factory.mktemp("report") / "report.json"
    assert main(["rewrite", str(program), "-q", "--report", str(report_file)]) == 1
    script, model = (program / "train.py").read_text(), (program / "modeling.py").read_text()
    assert _without_todos(script) == PROGRAM_SCRIPT and _without_todos(model) == MODEL
    assert "pad=True" in _todo_above(model, "self.up = layers.ColumnParallelLinear(hidden, hidden, gather_output=False, pad=True)")
    assert "`modeling.py`, which shares its mesh, is left to a person" in script
    assert not (program / "parallel_mesh.py").exists()
    report = json.loads(report_file.read_text())
    assert {f["status"] for f in report["files"]} == {KEPT}


EVAL_SCRIPT = PROGRAM_SCRIPT.replace("def main():", "def evaluate():")
PLAIN_MODEL = MODEL.replace(", pad=True)", ")")


def test_two_scripts_may_share_one_model_file(tmp_path: Path) -> None:
    (tmp_path / "modeling.py").write_text(PLAIN_MODEL)
    (tmp_path / "train.py").write_text(PROGRAM_SCRIPT)
    (tmp_path / "evaluate.py").write_text(EVAL_SCRIPT)
    assert main(["rewrite", str(tmp_path), "-q"]) == 0
    for script in ("train.py", "evaluate.py"):
        text = (tmp_path / script).read_text()
        assert "parallel_mesh.mesh = init_device_mesh(" in text and "neuronx_distributed" not in text
    assert "parallel_mesh.mesh[" in (tmp_path / "modeling.py").read_text()


def test_a_script_that_imports_another_one_that_builds_the_mesh_is_left(tmp_path: Path) -> None:
    (tmp_path / "modeling.py").write_text(PLAIN_MODEL)
    (tmp_path / "train.py").write_text(PROGRAM_SCRIPT)
    (tmp_path / "evaluate.py").write_text("from train import main\n" + EVAL_SCRIPT)
    assert main(["rewrite", str(tmp_path), "-q"]) == 1
    evaluate = (tmp_path / "evaluate.py").read_text()
    assert "`evaluate.py` builds the mesh and imports another file that does" in evaluate
    assert _without_todos(evaluate) == "from train import main\n" + EVAL_SCRIPT


def test_a_cause_that_recurs_in_a_function_is_marked_once_there() -> None:
    source = SCRIPT.replace(
        "skip_bias_add=True).to(device)",
        "skip_bias_add=True).to(device)\n    head = layers.ColumnParallelLinear(8, 8, gather_output=False, skip_bias_add=True)",
    )
    result = rewrite_source(source, "train.py")
    assert result.migrated.count("`ColumnParallelLinear(skip_bias_add=True)` has no native counterpart here") == 1
    assert "the 2 lines marked NM025 below hold it back" in result.migrated  # the layer and the clipping


def test_a_strided_layer_s_program_loading_per_rank_slices_in_another_file_is_told_where_it_loads(tmp_path: Path) -> None:
    """A `stride=` layer holds other rows on each rank than NxD's: the program moves, and the
    script that loads per-rank slices beside it (files NxD may have written) gets a TODO there."""
    model = PLAIN_MODEL.replace("gather_output=False)", "gather_output=False, stride=2)")
    (tmp_path / "modeling.py").write_text(model)
    script = PROGRAM_SCRIPT.replace(
        "    xm.mark_step()\n",
        "    xm.mark_step()\n    torch.save(model.state_dict(), 'rank.pt')\n    model.load_state_dict(torch.load('rank.pt'))\n",
    )
    (tmp_path / "train.py").write_text("import torch\n" + script)
    assert main(["rewrite", str(tmp_path), "-q"]) == 1  # a TODO to review
    assert "ColwiseParallel(output_layouts=strided_shard(2))" in (tmp_path / "modeling.py").read_text()
    migrated = (tmp_path / "train.py").read_text()
    assert "neuronx_distributed" not in migrated
    todo = "`stride=` layers keep other rows on each rank than NxD did: load files the migrated program wrote, not NxD's"
    assert migrated.count(todo) == 1
    assert migrated.index(todo) < migrated.index("load_shards_into(model")


def test_a_whole_checkpoint_load_is_named_with_its_native_form() -> None:
    import ast

    from neuron_migrate.rewrite.codemods.nxd_checkpointing import LOAD_SHARDS, shards_call_blocker

    call = ast.parse('load("m.pt", model, sharded=False)').body[0].value  # type: ignore[attr-defined]
    reason = shards_call_blocker(LOAD_SHARDS[0], call, None)
    assert reason is not None and "`set_model_state_dict(...)` with `full_state_dict=True`" in reason


TRACED = '''\
import torch
import neuronx_distributed
from neuronx_distributed.parallel_layers import parallel_state


def get_model():
    return torch.nn.Linear(4, 4), {}


traced = neuronx_distributed.trace.parallel_model_trace(get_model, (torch.ones(1, 4),), tp_degree=1)
'''


def test_a_file_whose_trace_sets_up_the_groups_is_not_told_they_are_set_up_elsewhere() -> None:
    migrated = rewrite_source(TRACED, "trace.py").migrated
    assert "groups are set up in another file" not in migrated
    assert "is not called once on every run" not in migrated
    assert "`parallel_model_trace`: shard `get_model()` over 1 ranks" in migrated


def test_a_program_that_reads_the_kept_master_weight_is_left_with_its_native_form() -> None:
    fixture = Path(__file__).parent / "fixtures" / "rewrite" / "nxd_tensor_parallel" / "keep_master_weight.in.py"
    source = fixture.read_text().replace(
        "    print(down(up(x)).sum())", "    print(down(up(x)).sum(), up.master_weight.shape)"
    )
    migrated = rewrite_source(source, "train.py").migrated
    assert "`.master_weight` (the whole weight `keep_master_weight=True` kept): natively `weight.full_tensor()`" in migrated
