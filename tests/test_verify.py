"""Each migrated file is checked against the libraries it now targets: imports resolve, calls fit
the installed signatures; what fails gets a TODO at its statement, and the report claims only
what was checked."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_migrate.cli import main
from neuron_migrate.rewrite import report
from neuron_migrate.rewrite.verify import CODE, with_todos
from neuron_migrate.rewrite.verify.checks import Problem, _mismatches

pytest.importorskip("transformers")

# transformers-4 API left in a file whose old-stack lines the migration moves to native torch.
TRANSFORMERS_4 = """\
import torch
import torch_xla.core.xla_model as xm
from transformers import TrainingArguments, is_torch_tpu_available

device = xm.xla_device()
args = TrainingArguments(
    output_dir="out",
    evaluation_strategy="epoch",
)
if is_torch_tpu_available():
    print("on a TPU")
layer = torch.nn.Linear(4, 4, True, device, torch.float32, "extra")
"""

CLEAN = """\
import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
layer = torch.nn.Linear(4, 4, bias=False).to(device)
print(torch.compile(layer)(torch.ones(2, 4, device=device)))
"""


def _rewrite(tmp_path: Path, text: str, *options: str) -> tuple[str, dict]:
    src = tmp_path / "src" / "train.py"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(text)
    out = tmp_path / "out"
    # The upgrade rules (NM2) would fix the transformers 4 API these tests leave for the check.
    main(["rewrite", str(src), "--output-dir", str(out), "-q", "--report", str(tmp_path / "r.json"), "--ignore", "NM2", *options])
    [entry] = json.loads((tmp_path / "r.json").read_text())["files"]
    return (out / "train.py").read_text(), entry


def _todo_above(text: str, statement: str) -> str:
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(statement))
    assert lines[index - 1].lstrip().startswith(f"# TODO(neuron-migrate {CODE}): "), lines[index - 1]
    return lines[index - 1]


def test_transformers_4_api_left_in_a_migrated_file_gets_a_todo_at_each_line(tmp_path: Path) -> None:
    migrated, entry = _rewrite(tmp_path, TRANSFORMERS_4)
    assert "xm." not in migrated
    assert "`transformers.is_torch_tpu_available` does not exist in transformers 5." in _todo_above(
        migrated, "from transformers import"
    )
    assert "no keyword `evaluation_strategy`" in _todo_above(migrated, "args = TrainingArguments(")
    assert "takes at most 5 positional arguments, 6 given" in _todo_above(migrated, "layer = torch.nn.Linear(")
    # The call of the name whose import fails says nothing more: one TODO per cause.
    assert sum(f"TODO(neuron-migrate {CODE})" in line for line in migrated.splitlines()) == 3
    assert entry["status"] == report.AFTER_TODOS
    assert entry["checked_against"]["transformers"].startswith("5.")
    for todo in entry["manual"]:
        assert len(todo["message"]) <= 160


def test_the_todos_are_not_written_twice(tmp_path: Path) -> None:
    migrated, _ = _rewrite(tmp_path, TRANSFORMERS_4)
    again, entry = _rewrite(tmp_path / "again", migrated)
    assert again == migrated
    assert entry["changes"] == []


def test_a_file_whose_imports_and_calls_fit_is_called_checked_and_nothing_more(tmp_path: Path) -> None:
    migrated, entry = _rewrite(tmp_path, CLEAN)
    assert "TODO" not in migrated
    assert entry["status"] == report.CHECKED
    assert set(entry["checked_against"]) == {"torch"}
    markdown = tmp_path / "r.md"
    main(["rewrite", str(tmp_path / "src"), "--output-dir", str(tmp_path / "md"), "-q", "--report", str(markdown)])
    text = markdown.read_text()
    assert "checked against torch " in text and "neuron-migrate validate" in text
    assert "runs natively" not in text


def test_without_the_target_libraries_the_report_says_not_checked(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = bare / "bin" / "python"
    migrated, entry = _rewrite(tmp_path, TRANSFORMERS_4, "--target-python", str(python))
    assert CODE not in migrated
    assert entry["status"] == report.UNCHECKED
    markdown = tmp_path / "r.md"
    main(["rewrite", str(tmp_path / "src"), "--output-dir", str(tmp_path / "md"), "-q", "--report", str(markdown),
          "--target-python", str(python)])
    assert "not installed where it was checked: torch, transformers" in markdown.read_text()


def test_the_check_is_a_rule_that_can_be_ignored(tmp_path: Path) -> None:
    migrated, entry = _rewrite(tmp_path, TRANSFORMERS_4, "--ignore", CODE)
    assert CODE not in migrated
    assert entry["status"] == report.UNCHECKED and entry["checked_against"] is None


def _parameters(function) -> tuple[tuple[str, int, bool], ...]:
    return tuple(
        (p.name, int(p.kind), p.default is not inspect.Parameter.empty) for p in inspect.signature(function).parameters.values()
    )


def _call(text: str) -> ast.Call:
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call)
    return node


def test_calls_are_judged_as_binding_them_would() -> None:
    def f(a, b=1, *, c=2):
        pass

    def g(a, /, **kwargs):
        pass

    def h(*args, **kwargs):
        pass

    assert list(_mismatches(_call("f(1, 2)"), _parameters(f))) == []
    assert list(_mismatches(_call("f(1, 2, 3)"), _parameters(f))) == [("takes at most 2 positional arguments, 3 given", "")]
    assert list(_mismatches(_call("f(1, d=4)"), _parameters(f))) == [("no keyword `d`", "d")]
    assert list(_mismatches(_call("f(c=3)"), _parameters(f))) == [("missing `a`", "")]
    assert list(_mismatches(_call("f(*xs)"), _parameters(f))) == []  # what the spread holds is not known
    assert list(_mismatches(_call("f(**options)"), _parameters(f))) == []
    assert list(_mismatches(_call("g(1, a=2, anything=3)"), _parameters(g))) == []  # `a=` goes to **kwargs
    assert list(_mismatches(_call("h(1, 2, x=3)"), _parameters(h))) == []


def test_todos_go_above_their_statement_indented_like_it() -> None:
    text = "def f():\r\n    x = call(\r\n        1)\r\n    return x\r\n"
    marked = with_todos(text, [Problem(2, "`call()`: no keyword `y`"), Problem(2, "`call()`: no keyword `y`")])
    assert marked == (
        "def f():\r\n    # TODO(neuron-migrate NM091): `call()`: no keyword `y`\r\n    x = call(\r\n        1)\r\n    return x\r\n"
    )
    assert with_todos(marked, [Problem(3, "`call()`: no keyword `y`")]) == marked


def test_a_todo_above_that_names_the_subject_is_enough() -> None:
    """A codemod that flagged `past_index=` said why; the target check adds no second TODO."""
    text = "# TODO(neuron-migrate NM201): `past_index=2` no longer exists: ...\nargs = TrainingArguments(past_index=2)\n"
    assert with_todos(text, [Problem(2, "`TrainingArguments()`: no keyword `past_index`", "past_index")]) == text
    other = with_todos(text, [Problem(2, "`TrainingArguments()`: no keyword `x`", "x")])
    assert other.count("TODO") == 2


def test_a_problem_that_cannot_be_marked_leaves_the_file_unchecked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a TODO line would break the file, it is not written, and the report never says checked."""
    import neuron_migrate.rewrite.verify as verify

    monkeypatch.setattr(verify, "with_todos", lambda text, problems: text + "(\n" if problems else text)
    migrated, entry = _rewrite(tmp_path, TRANSFORMERS_4, "-j", "1")
    assert CODE not in migrated
    assert entry["status"] == report.UNCHECKED
    assert "could not be marked with a TODO" in entry["why"]


def test_what_only_the_run_or_the_folder_can_say_is_not_judged(tmp_path: Path) -> None:
    """An op library loaded at run time, a package of the project that shadows a library of the
    same name, and the `neuron` device module of torch-neuronx (not installed here) get no TODO;
    the last makes the file unchecked, and the report says why."""
    source = (
        "import torch\nimport torch_xla.core.xla_model as xm\nfrom datasets import loaders\n\n"
        "torch.ops.load_library('my_ops.so')\ny = torch.ops.my_ops.relu_forward(torch.ones(2))\n"
        "xm.set_rng_state(0)\nprint(loaders.ready(), y.to(xm.xla_device()))\n"
    )
    (tmp_path / "src").mkdir()
    (tmp_path / "datasets").mkdir()  # the project's own package, one folder up
    (tmp_path / "datasets" / "__init__.py").write_text("loaders = None\n")
    migrated, entry = _rewrite(tmp_path, source, "--target", "neuron")
    assert "torch.neuron.manual_seed(0)" in migrated
    assert CODE not in migrated
    assert entry["status"] == report.UNCHECKED
    markdown = tmp_path / "r.md"
    main(["rewrite", str(tmp_path / "src" / "train.py"), "--output-dir", str(tmp_path / "md"), "-q",
          "--report", str(markdown), "--target", "neuron"])
    assert "not installed where it was checked: torch-neuronx" in markdown.read_text()


def test_a_notebook_is_checked_as_its_cells_run_and_the_todo_lands_in_its_cell(tmp_path: Path) -> None:
    cells = [
        "import torch_xla.core.xla_model as xm\nfrom transformers import TrainingArguments",
        "%time device = xm.xla_device()",
        "args = TrainingArguments(output_dir='out', evaluation_strategy='epoch')\nprint(device)",
    ]
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": text}
            for i, text in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    src = tmp_path / "tutorial.ipynb"
    src.write_text(json.dumps(notebook, indent=1) + "\n")
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "out"), "-q", "--report", str(tmp_path / "r.json"), "--ignore", "NM2"])
    migrated = json.loads((tmp_path / "out" / "tutorial.ipynb").read_text())
    last = migrated["cells"][2]["source"]
    last = "".join(last) if isinstance(last, list) else last
    assert last.startswith(f"# TODO(neuron-migrate {CODE}): `TrainingArguments()`: no keyword `evaluation_strategy`")
    [entry] = json.loads((tmp_path / "r.json").read_text())["files"]
    [item] = [m for m in entry["manual"] if m["code"] == CODE]
    assert item["cell"] == 3 and item["location"]["row"] == 1
    assert entry["checked_against"]["transformers"].startswith("5.")


def test_answers_are_kept_for_the_next_run_against_the_same_libraries(tmp_path: Path) -> None:
    from neuron_migrate.rewrite.verify.target import TargetEnvironment

    first = TargetEnvironment(cache=tmp_path)
    answer = first.find("torch.nn.Linear")
    assert answer is not None and answer.parameters is not None and answer.parameters[0][0] == "in_features"
    first.save()
    first.close()
    [stored] = list(tmp_path.glob("*.json"))
    second = TargetEnvironment(cache=tmp_path)
    assert second.find("torch.nn.Linear") == answer
    assert second._new == {}  # answered from the file: the probe imported nothing
    second.close()
    assert [p.name for p in tmp_path.glob("*.json")] == [stored.name]


HELD_MODULE = '''\
import torch


def load_xla():
    import torch_xla.core.xla_model as xm

    return xm


def sync(device):
    xm = load_xla()
    xm.mark_step()
    xm.wait_device_ops()


def step(xm, model):
    xm.optimizer_step(model.optimizer)
'''


def test_the_old_stack_reached_through_a_variable_gets_a_todo_at_each_api_it_uses(tmp_path: Path) -> None:
    migrated, _ = _rewrite(tmp_path, HELD_MODULE + "    xm.optimizer_step(model.optimizer)\n    xm.mark_step()\n")
    assert _todo_above(migrated, "    xm.mark_step()").endswith(
        "`xm.mark_step` is likely `torch_xla.core.xla_model.mark_step`, out of the rules' sight: port it by hand"
    )
    assert "`xm.wait_device_ops` is likely" in _todo_above(migrated, "    xm.wait_device_ops()")
    assert "`xm.optimizer_step` is likely" in _todo_above(migrated, "    xm.optimizer_step(model.optimizer)")
    # One per API per function: the second `optimizer_step` of `step` is told already.
    assert migrated.count(f"TODO(neuron-migrate {CODE})") == 4


def test_a_rule_turned_off_keeps_its_old_stack_without_a_todo(tmp_path: Path) -> None:
    migrated, _ = _rewrite(tmp_path, "import torch_xla.core.xla_model as xm\n\nxm.mark_step()\n", "--ignore", "NM002")
    assert f"TODO(neuron-migrate {CODE})" not in migrated


TRAINER_SUBCLASS = '''\
from transformers import Trainer


class StepTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False):
        self.flush_neuron_cache(model)
        return model(**inputs).loss


class PlainTrainer(Trainer):
    pass


def build(model, tokenizer):
    return PlainTrainer(model=model, tokenizer=tokenizer), StepTrainer(model=model)
'''


def test_a_subclass_of_a_library_class_is_checked_against_it(tmp_path: Path) -> None:
    migrated, _ = _rewrite(tmp_path, "import torch_xla.core.xla_model as xm\n" + TRAINER_SUBCLASS + "xm.mark_step()\n")
    assert "`compute_loss` overrides `Trainer`'s, which takes `num_items_in_batch` too" in _todo_above(migrated, "    def compute_loss")
    assert "`self.flush_neuron_cache()`: `Trainer` has no such method" in _todo_above(migrated, "        self.flush_neuron_cache(model)")
    assert "no keyword `tokenizer`" in _todo_above(migrated, "    return PlainTrainer(")


def test_a_parameter_forwarded_by_position_into_a_renamed_one_gets_a_todo(tmp_path: Path) -> None:
    source = (
        "import torch_xla.core.xla_model as xm\n"
        "from transformers.models.bert.modeling_bert import BertSelfAttention\n\n\n"
        "class ParallelSelfAttention(BertSelfAttention):\n"
        "    def __init__(self, config, position_embedding_type=None):\n"
        "        super().__init__(config, position_embedding_type)\n"
        "        self.device = xm.xla_device()\n"
    )
    migrated, _ = _rewrite(tmp_path, source)
    todo = _todo_above(migrated, "        super().__init__(config, position_embedding_type)")
    assert "`position_embedding_type` goes to `BertSelfAttention`'s `is_causal` by position" in todo


def test_a_keyword_handed_on_through_kwargs_must_fit_the_call_it_reaches(tmp_path: Path) -> None:
    source = (
        "import torch_xla.core.xla_model as xm\n"
        "from transformers import TrainingArguments\n\n\n"
        "def training_arguments(output_dir, steps=10, **kwargs):\n"
        "    return TrainingArguments(output_dir, max_steps=steps, **kwargs)\n\n\n"
        "device = xm.xla_device()\n"
        'args = training_arguments("out", steps=5, tpu_num_cores=8)\n'
        'fine = training_arguments("out", steps=5, seed=1)\n'
    )
    migrated, _ = _rewrite(tmp_path, source)
    todo = _todo_above(migrated, 'args = training_arguments("out", steps=5, tpu_num_cores=8)')
    assert "`training_arguments()` hands `tpu_num_cores` on to `TrainingArguments()`, which takes no such keyword" in todo
    assert "TODO" not in migrated.split('fine = training_arguments("out", steps=5, seed=1)')[0].splitlines()[-1]


def test_the_api_of_an_object_an_old_stack_class_made_gets_a_todo_at_each_use(tmp_path: Path) -> None:
    source = (
        "import torch\n"
        "from transformers_neuronx.mistral.model import MistralForSampling\n\n\n"
        "class Server:\n"
        "    def __init__(self):\n"
        '        self.model = MistralForSampling.from_pretrained("./mistral-neuron", tp_degree=2)\n'
        "        self.model.to_neuron()\n\n"
        "    def generate(self, ids):\n"
        "        with torch.inference_mode():\n"
        "            return self.model.sample(ids, sequence_length=64)\n"
    )
    migrated, _ = _rewrite(tmp_path, source)
    assert "`self.model.to_neuron` is the API of `MistralForSampling`" in _todo_above(migrated, "        self.model.to_neuron()")
    assert "`self.model.sample` is the API of `MistralForSampling`" in _todo_above(migrated, "            return self.model.sample(")


def test_a_call_of_the_files_own_function_that_the_migration_wrote_is_bound_to_its_def(tmp_path: Path) -> None:
    source = (
        "import torch_xla.core.xla_model as xm\n"
        "import torch_xla.distributed.xla_multiprocessing as xmp\n\n\n"
        "def main(flags):\n"
        "    device = xm.xla_device()\n\n\n"
        "def spare(flags, extra):\n"
        "    return flags\n\n\n"
        'if __name__ == "__main__":\n'
        "    spare(1)  # the user's own call, as it was\n"
        "    xmp.spawn(main, args=(None,))\n"
    )
    migrated, _ = _rewrite(tmp_path, source)
    call = next(line for line in migrated.splitlines() if line.lstrip().startswith("main("))
    assert "`main()`: takes at most 1 positional arguments, 2 given" in _todo_above(migrated, call)
    assert "`spare()`" not in migrated


def test_a_module_beside_the_file_that_still_imports_the_old_stack_gets_a_todo_unless_migrated_too(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "sharding.py").write_text("import torch_xla.core.xla_model as xm\n\n\ndef device():\n    return xm.xla_device()\n")
    (tmp_path / "src" / "plain.py").write_text("def twice(x):\n    return 2 * x\n")
    source = "import torch_xla.core.xla_model as xm\nfrom sharding import device\nfrom plain import twice\n\nxm.mark_step()\n"
    migrated, _ = _rewrite(tmp_path, source)
    assert "`sharding` (sharding.py) still imports the old stack" in _todo_above(migrated, "from sharding import device")
    assert "`plain`" not in migrated
    out = tmp_path / "together"
    main(["rewrite", str(tmp_path / "src" / "train.py"), str(tmp_path / "src" / "sharding.py"), "--output-dir", str(out), "-q"])
    assert "still imports the old stack" not in (out / "train.py").read_text()



def test_a_script_the_file_runs_that_keeps_the_old_stack_gets_a_todo_unless_migrated_too(tmp_path: Path) -> None:
    (tmp_path / "src" / "tools").mkdir(parents=True)
    (tmp_path / "src" / "tools" / "merge.py").write_text("from optimum.neuron.models.training import consolidate\n")
    (tmp_path / "src" / "plain.py").write_text("print('native')\n")
    source = (
        "import os\nimport subprocess as sp\nimport sys\n\nimport torch_xla.core.xla_model as xm\n\nxm.mark_step()\n"
        'sp.run([sys.executable, "tools/merge.py", "-i", "out"], check=True)\n'
        'os.system("python plain.py --steps 3")\n'
        'sp.run(["python3", "made_later.py"])\n'
        'sp.run(["wget", "https://example.com/get.py"])\n'
    )
    migrated, _ = _rewrite(tmp_path, source)
    assert "this runs `tools/merge.py`, which still imports the old stack" in _todo_above(migrated, "sp.run([sys.executable")
    assert "this runs `made_later.py`, which is not beside this file" in _todo_above(migrated, 'sp.run(["python3"')
    assert "plain.py`" not in migrated and "get.py`" not in migrated
    out = tmp_path / "together"
    main(["rewrite", str(tmp_path / "src" / "train.py"), str(tmp_path / "src" / "tools" / "merge.py"), "--output-dir", str(out), "-q"])
    assert "tools/merge.py`" not in (out / "train.py").read_text()



def test_a_test_for_the_old_stack_that_guarded_migrated_code_gets_a_todo_wherever_it_is_read(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "avail.py").write_text(
        "try:\n    import optimum.neuron  # noqa: F401\n    HAS_NEURON = True\nexcept ImportError:\n    HAS_NEURON = False\n"
    )
    source = (
        "from avail import HAS_NEURON\n\nif HAS_NEURON:\n    from optimum.neuron import NeuronModelForSequenceClassification\n\n\n"
        "def load(name):\n    if not HAS_NEURON:\n        raise ImportError('optimum-neuron is required')\n"
        "    return NeuronModelForSequenceClassification.from_pretrained(name)\n"
    )
    migrated, _ = _rewrite(tmp_path, source)
    assert "import optimum" not in migrated.split("if HAS_NEURON:")[1]
    message = "`HAS_NEURON` tests for `optimum.neuron`, which the code it guarded no longer imports"
    assert message in _todo_above(migrated, "if HAS_NEURON:")
    assert message in _todo_above(migrated, "    if not HAS_NEURON:")


def test_a_trainer_asked_for_tpu_cores_gets_a_todo_in_a_file_with_no_old_stack_import(tmp_path: Path) -> None:
    source = "import pytorch_lightning as pl\n\ntrainer = pl.Trainer(tpu_cores=8, max_epochs=1)\nother = pl.Trainer(accelerator='tpu')\n"
    migrated, entry = _rewrite(tmp_path, source)
    assert "`tpu_cores=` runs the trainer on TPU cores through torch_xla" in _todo_above(migrated, "trainer = ")
    assert '`accelerator="tpu"` runs the trainer' in _todo_above(migrated, "other = ")
    assert entry["status"] == report.AFTER_TODOS


XLA_CHOICES = '''\
import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
use_xla = True
device_type = "xla" if use_xla else "cpu"
print("on xla", device_type)
with torch.autocast(device_type, dtype=torch.bfloat16):
    pass
'''


def test_a_string_that_chooses_xla_gets_a_todo_and_a_label_does_not(tmp_path: Path) -> None:
    migrated, _ = _rewrite(tmp_path, XLA_CHOICES + "model = torch.nn.Linear(2, 2)\nmodel.enable_xla_flash_attention()\n")
    assert '`"xla"` chooses XLA' in _todo_above(migrated, "device_type = ")
    assert "`.enable_xla_flash_attention()` turns on the library's torch_xla path" in _todo_above(
        migrated, "model.enable_xla_flash_attention()"
    )
    assert migrated.count(f"TODO(neuron-migrate {CODE})") == 2  # not the message printed


IMPORTED_BY_NAME = '''\
import importlib

import torch_xla.core.xla_model as xm

NxDModel = importlib.import_module("neuronx_distributed").NxDModel
model = NxDModel.load("model.pt")
model.to_neuron()
xm.mark_step()
'''


def test_an_object_of_a_package_imported_by_its_name_gets_a_todo_at_its_api(tmp_path: Path) -> None:
    migrated, entry = _rewrite(tmp_path, IMPORTED_BY_NAME)
    assert "`NxDModel.load` is the API of `NxDModel`" in _todo_above(migrated, "model = NxDModel.load")
    assert "`model.to_neuron` is the API of `NxDModel`" in _todo_above(migrated, "model.to_neuron()")
    assert "test `torch.accelerator.is_available()`" not in migrated  # an import, not a probe
    assert entry["status"].startswith("fails at start-up")


CLEARED_ENVIRONMENT = '''\
import os

for name in ("WORLD_SIZE", "RANK", "PATH"):
    os.environ.pop(name, None)
os.environ.pop("LOCAL_RANK", None)
os.environ["OMP_NUM_THREADS"] = "1"

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp


def _mp_fn(index):
    print(index, torch.ones(1, device=xm.xla_device()))


if __name__ == "__main__":
    xmp.spawn(_mp_fn, args=())
'''


def test_torchrun_s_variables_cleared_before_the_group_is_made_get_a_todo(tmp_path: Path) -> None:
    migrated, _ = _rewrite(tmp_path, CLEARED_ENVIRONMENT)
    assert "dist.init_process_group()" in migrated
    assert _todo_above(migrated, "for name in").endswith(
        "`WORLD_SIZE`, `RANK` cleared here: torchrun sets them for `init_process_group()`, which then fails: drop this under torchrun"
    )
    assert "`LOCAL_RANK` cleared here: torchrun sets it" in _todo_above(migrated, 'os.environ.pop("LOCAL_RANK"')
    assert migrated.count(f"TODO(neuron-migrate {CODE})") == 2  # not `OMP_NUM_THREADS`


def test_a_file_importing_a_package_absent_from_the_target_is_not_called_checked(tmp_path: Path) -> None:
    source = "import torch_xla.core.xla_model as xm\nimport no_such_package_here\n\ndevice = xm.xla_device()\n"
    _, entry = _rewrite(tmp_path, source)
    assert entry["status"] == report.UNCHECKED
    assert "no_such_package_here" in entry["why"]
