"""Notebooks: migrate the code cells, keep every other byte of the JSON."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from neuron_migrate.cli import main
from neuron_migrate.core.oldstack import REMOVED_STEPS
from neuron_migrate.rewrite.engine import Options
from neuron_migrate.rewrite.notebook import rewrite_notebook
from neuron_migrate.rewrite.shell import rewrite_shell_command

CELLS = [
    ("markdown", "# Train on Trainium\nWe use the XLA device."),
    ("code", "%env PJRT_DEVICE=NEURON\n!pip list | grep torch\nimport torch\nimport torch_xla.core.xla_model as xm"),
    ("code", "device = xm.xla_device()  # the NeuronCore\nx = torch.ones(3, device=device)"),
    ("code", "%%time\nfor _ in range(2):\n    y = x * 2\n    xm.mark_step()"),
    ("code", "%%bash\necho xm.mark_step()"),
    ("code", "print(y)"),
]


def build(cells: list[tuple[str, str]] = CELLS) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, source in cells:
        nb.cells.append(nbformat.v4.new_markdown_cell(source) if kind == "markdown" else nbformat.v4.new_code_cell(source))
    if cells is CELLS:
        nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="torch 2.9.0\n")]
    return nb


def rewrite(raw: str) -> tuple[str, object]:
    outcome = rewrite_notebook(raw, "nb.ipynb", Options())
    assert outcome.result.error is None, outcome.result.error
    return outcome.result.migrated, outcome


def test_cells_are_migrated_together() -> None:
    raw = nbformat.writes(build())
    new, _ = rewrite(raw)
    nb = json.loads(new)
    sources = ["".join(c["source"]) for c in nb["cells"]]
    assert sources[1] == (
        "# (removed `%env PJRT_DEVICE`: it configured the XLA runtime)\n!pip list | grep torch\nimport torch"
    )
    assert sources[2] == (
        'device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")  # the NeuronCore\n'
        "x = torch.ones(3, device=device)"
    )
    assert sources[3] == "%%time\nfor _ in range(2):\n    y = x * 2"
    assert sources[4] == "%%bash\necho xm.mark_step()"  # not Python: untouched
    assert "".join(nb["cells"][1]["outputs"][0]["text"]) == "torch 2.9.0\n"


def test_only_changed_sources_are_rewritten() -> None:
    raw = nbformat.writes(build())
    new, outcome = rewrite(raw)
    assert [index for index, _, _ in outcome.cells] == [1, 2, 3]  # type: ignore[attr-defined]
    old_nb, new_nb = json.loads(raw), json.loads(new)
    for old, cell in zip(old_nb["cells"], new_nb["cells"], strict=True):
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in cell.items() if k != "source"}
    assert new.endswith("\n") == raw.endswith("\n")


def test_no_op_rewrite_is_byte_identical() -> None:
    raw = nbformat.writes(build([("code", "import torch\nprint(torch.ones(2))"), ("markdown", "done")]))
    new, _ = rewrite(raw)
    assert new == raw


COLAB = (
    '{\n  "nbformat": 4,\n  "nbformat_minor": 0,\n  "metadata": {\n    "colab": {"provenance": []},\n'
    '    "kernelspec": {"name": "python3", "display_name": "Python 3"}\n  },\n  "cells": [\n'
    '    {\n      "cell_type": "code",\n      "source": [\n        "import torch_xla.core.xla_model as xm\\n",\n'
    '        "# caf\\u00e9 \\u2014 accents stay escaped\\n",\n        "xm.mark_step()"\n      ],\n'
    '      "metadata": {"id": "abc"},\n      "execution_count": null,\n      "outputs": []\n    }\n  ]\n}'
)


def test_colab_layout_is_kept() -> None:
    new, _ = rewrite(COLAB)
    expected = COLAB.replace(
        '"source": [\n        "import torch_xla.core.xla_model as xm\\n",\n        "# caf\\u00e9 \\u2014 accents stay escaped\\n",\n        "xm.mark_step()"\n      ]',
        '"source": [\n        "# caf\\u00e9 \\u2014 accents stay escaped"\n      ]',
    )
    assert new == expected


def test_crlf_and_string_source() -> None:
    raw = json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 2,
            "metadata": {},
            "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1, "source": "import torch_xla\ntorch_xla.sync()\nprint(1)"}],
        },
        indent=1,
    ).replace("\n", "\r\n")
    new, _ = rewrite(raw)
    assert "\r\n" in new and "\n" not in new.replace("\r\n", "")
    assert json.loads(new)["cells"][0]["source"] == "print(1)"


def test_writefile_cell_is_a_file_of_its_own() -> None:
    raw = nbformat.writes(
        build([("code", "%%writefile train.py\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n")])
    )
    new, _ = rewrite(raw)
    source = "".join(json.loads(new)["cells"][0]["source"])
    assert source.startswith("%%writefile train.py\nimport torch\n")
    assert "xm." not in source


def test_manual_items_point_at_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nb = build([("code", "import torch_xla.core.xla_model as xm"), ("markdown", "gather"), ("code", "x = 1\ny = xm.all_gather(x)")])
    path = tmp_path / "nb.ipynb"
    path.write_text(nbformat.writes(nb))
    assert main(["rewrite", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:cell 3:2:1: NM006 " in err
    assert main(["rewrite", str(path)]) == 1  # idempotent: the TODO is not added twice
    assert "".join(json.loads(path.read_text())["cells"][2]["source"]).count("TODO(neuron-migrate") == 1


def test_a_notebook_on_stdin_is_migrated_as_a_notebook(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    raw = nbformat.writes(build([("code", "import torch_xla.core.xla_model as xm"), ("code", "x = 1\ny = xm.all_gather(x)")]))

    def rewrite_stdin(*args: str) -> tuple[int, bytes, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw.encode())))
        code = main(["rewrite", "-", *args])
        out, err = capsysbinary.readouterr()
        return code, out, err.decode()

    code, out, err = rewrite_stdin()  # recognised by its JSON
    assert code == 1 and "<stdin>:cell 2:2:1: NM006 " in err
    cells = json.loads(out)["cells"]
    assert "".join(cells[1]["source"]).count("TODO(neuron-migrate NM006)") == 1
    code, named, err = rewrite_stdin("--stdin-filename", "train.ipynb")
    assert named == out and "train.ipynb:cell 2:2:1: NM006 " in err
    code, as_python, _ = rewrite_stdin("--stdin-filename", "train.py")  # the name wins: JSON as Python
    assert code == 0 and as_python == raw.encode()


def test_diff_is_per_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nb.ipynb"
    path.write_text(nbformat.writes(build()))
    assert main(["rewrite", str(path), "--diff"]) == 1
    out = capsys.readouterr().out
    assert f"--- a/{path}:cell 3\n" in out and f"+++ b/{path}:cell 3\n" in out
    assert "-device = xm.xla_device()  # the NeuronCore" in out


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not a valid notebook (invalid JSON"),
        ('{"nbformat": 3, "worksheets": [], "cells": []}', "nbformat 3 is not supported"),
        ("[]", "not a notebook"),
    ],
)
def test_bad_notebooks_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: str, message: str) -> None:
    path = tmp_path / "bad.ipynb"
    path.write_text(raw)
    assert main(["rewrite", str(path)]) == 2
    assert message in capsys.readouterr().err
    assert path.read_text() == raw


def test_a_cell_that_is_not_python_is_left_and_named_while_the_others_migrate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = "x = (1,\ndef f(:"
    rst = ".. contents:: Table of contents\n    :local:"
    path = tmp_path / "nb.ipynb"
    path.write_text(
        nbformat.writes(
            build([("code", "import torch_xla.core.xla_model as xm"), ("code", broken), ("code", rst), ("code", "xm.mark_step()")])
        )
    )
    assert main(["rewrite", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"note: {path}: NM090 cell 2 is not Python (2:1: invalid syntax): left as it is, not migrated" in err
    assert f"note: {path}: NM090 cell 3 is not Python (1:1: invalid syntax)" in err
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    assert cells[1:3] == [broken, rst]
    assert "xm" not in cells[0] + cells[3]


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="the cell is Python here")
def test_a_cell_in_newer_python_names_the_python_it_needs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nb.ipynb"
    path.write_text(nbformat.writes(build([("code", "import torch_xla.core.xla_model as xm"), ("code", 'greeting = t"hi {name}"')])))
    assert main(["rewrite", str(path)]) == 0
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert (
        f"cell 2 is not Python (1:13: invalid syntax (template strings (`t\"...\"`) need Python 3.14+; "
        f"neuron-migrate is running on Python {running}))" in capsys.readouterr().err
    )


def test_other_languages_are_skipped(tmp_path: Path) -> None:
    nb = build([("code", "library(torch_xla)")])
    nb.metadata["kernelspec"]["language"] = "R"
    path = tmp_path / "r.ipynb"
    path.write_text(nbformat.writes(nb))
    assert main(["rewrite", str(path)]) == 0


def test_shell_lines_that_configure_or_launch_old_stack_work() -> None:
    cells = [
        ("code", "%env XLA_USE_BF16=1\n%env NEURON_RT_NUM_CORES=2"),
        ("code", "!neuron_parallel_compile torchrun --nproc_per_node=2 train.py"),
        ("code", "!XLA_USE_BF16=1 NEURON_CC_FLAGS='--model-type=transformer' torchrun --nproc_per_node=2 train.py"),
        ("code", "!optimum-cli export neuron --model gpt2 --batch_size 1 --sequence_length 128 out/"),
    ]
    new, outcome = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert sources[0] == (
        "# (removed `%env XLA_USE_BF16`: XLA's precision switch; natively the dtype is set in the code)\n"
        "%env NEURON_RT_NUM_CORES=2"
    )
    assert sources[1].startswith("# (removed: neuron_parallel_compile pre-compilation")
    # The kernel runs no torch code; the script the line runs is not in the notebook: a TODO says
    # where the dtype goes, as for the same switch in a `subprocess.run(env=...)`.
    todo, command = sources[2].split("\n")
    assert todo.startswith("# TODO(neuron-migrate NM009): `XLA_USE_BF16` set this child process's precision")
    assert command == "!NEURON_CC_FLAGS='--model-type=transformer' torchrun --nproc_per_node=2 train.py"
    assert sources[3].startswith("# (removed: ahead-of-time `optimum-cli export neuron`")
    result = outcome.result  # type: ignore[attr-defined]
    assert [(m.code, m.cell) for m in result.manual] == [("NM009", 3)]
    again, _ = rewrite(new)
    assert again == new


def test_a_cell_that_installs_the_old_stack_gets_a_todo() -> None:
    cells = [
        ("code", "!pip install -q torch_xla[tpu] -f https://storage.googleapis.com/libtpu-releases/index.html"),
        ("code", "!pip install -U torch-neuronx==2.1.2.2.3 neuronx-cc transformers"),
        ("code", "!pip install -q torch-neuronx==2.13.* transformers"),
        ("code", "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()"),
        # The torch the old wheels went with would replace the one the migrated cells need.
        ("code", "!pip install torch==1.11.0 'torchvision<0.13'"),
        ("code", "!pip install -U torch==2.13.0"),
    ]
    new, _ = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert "# TODO(neuron-migrate NM020): this installs the old stack (`torch_xla`)" in sources[0]
    assert sources[1].startswith("# TODO(neuron-migrate NM020): this installs the old stack (`torch-neuronx==2.1`)")
    assert sources[2] == cells[2][1]  # TorchNeuron's own package family
    assert sources[4].startswith("# TODO(neuron-migrate NM020): this pins `torch==1.11.0`, the torch of the old stack")
    assert sources[5] == cells[5][1]
    again, _ = rewrite(new)
    assert again == new


# A sum bf16 cannot hold: torch_xla 2.9 on PJRT CPU prints 1.0 under XLA_USE_BF16=1 (the
# device stored the tensor as bf16) and 1.0009765625 without.
BF16_PROBE = "x = torch.ones(1, device=xm.xla_device()) + 2 ** -10\nprint(x.cpu().item())"
IMPORTS = "import torch\nimport torch_xla.core.xla_model as xm\n"


def test_precision_set_in_magics_and_shell_lines_becomes_a_dtype_policy_where_it_acted(tmp_path: Path) -> None:
    cells = [
        ("code", "%env XLA_USE_BF16=1"),  # the kernel's own environment, as os.environ[...] = "1"
        ("code", IMPORTS + BF16_PROBE),
        ("code", "%%writefile train_bf16.py\n" + IMPORTS + BF16_PROBE),
        ("code", "!XLA_USE_BF16=1 torchrun --nproc_per_node=1 train_bf16.py"),
        ("code", "!python evaluate.py"),  # inherits the kernel's XLA_USE_BF16; not in the notebook
    ]
    new, outcome = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    # Both processes ran with the switch: the tensor made on the device is made in bf16 there.
    cast = "torch.ones(1, device=torch.accelerator.current_accelerator(check_available=True) or torch.device(\"cpu\"), dtype=torch.bfloat16)"
    assert cast in sources[1] and cast in sources[2]
    assert sources[3] == "!torchrun --nproc_per_node=1 train_bf16.py"  # its script casts now
    assert sources[4].startswith("# TODO(neuron-migrate NM009): `XLA_USE_BF16` set this child process's precision")
    result = outcome.result  # type: ignore[attr-defined]
    assert [(m.code, m.cell) for m in result.manual] == [("NM009", 5)]
    # The migrated kernel and script compute in bf16, as torch_xla did.
    kernel, script = tmp_path / "kernel.py", tmp_path / "train_bf16.py"
    kernel.write_text(sources[1])
    script.write_text(sources[2].partition("\n")[2])
    for program in (kernel, script):
        done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "1.0\n"
    again, _ = rewrite(new)
    assert again == new


def test_kernel_switch_sets_no_dtype_where_the_kernel_never_loads_the_old_stack() -> None:
    # torch without torch_xla ignores XLA_USE_BF16: the kernel prepared its data in float32, and
    # only the script it launches (which inherits the switch) read it.
    prepare = "import torch\nx = torch.arange(4.0)\ntorch.save(x, 'data.pt')"
    cells = [
        ("code", "%env XLA_USE_BF16=1"),
        ("code", prepare),
        ("code", "!torchrun --nproc_per_node=2 train.py"),
    ]
    new, outcome = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert sources[1] == prepare
    assert sources[2].startswith("# TODO(neuron-migrate NM009): `XLA_USE_BF16` set this child process's precision")
    result = outcome.result  # type: ignore[attr-defined]
    assert [(m.code, m.cell) for m in result.manual] == [("NM009", 3)]


def test_clear_outputs_of_changed_cells_only(tmp_path: Path) -> None:
    nb = build()
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="xla:0\n")]
    nb.cells[2].execution_count = 3
    nb.cells[5].outputs = [nbformat.v4.new_output("stream", text="tensor([2., 2., 2.])\n")]
    path = tmp_path / "nb.ipynb"
    path.write_text(nbformat.writes(nb))
    assert main(["rewrite", str(path), "--clear-outputs", "-q"]) == 0
    cells = json.loads(path.read_text())["cells"]
    assert cells[2]["outputs"] == [] and cells[2]["execution_count"] is None  # changed: cleared
    assert cells[5]["outputs"][0]["text"] == ["tensor([2., 2., 2.])\n"]  # unchanged: kept
    assert cells[1]["outputs"] == []  # changed (the %env line), had an output


def test_an_export_whose_output_a_later_cell_reads_stays_for_a_person() -> None:
    cells = [
        ("code", "!optimum-cli export neuron --model ~/ckpt/merged --batch_size 4 ~/ckpt/compiled"),
        ("code", 'llm = LLM(model="~/ckpt/compiled", tensor_parallel_size=2)'),
    ]
    new, outcome = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    todo, command = sources[0].split("\n")
    assert todo == (
        "# TODO(neuron-migrate NM005): `optimum-cli export neuron` wrote `~/ckpt/compiled`, which this notebook may "
        "read later: natively nothing is exported, so point what reads it at the model itself (`~/ckpt/merged`), "
        "loaded with `from_pretrained`, then remove this step"
    )
    assert command == cells[0][1]
    assert [m.code for m in outcome.result.manual] == ["NM005"]  # type: ignore[attr-defined]


def test_a_continued_old_stack_step_goes_with_all_its_lines() -> None:
    cells = [
        ("code", "!optimum-cli export neuron --model gpt2 \\\n    --batch_size 1 \\\n    out/\nprint('done')"),
        ("code", "!neuron_parallel_compile torchrun --nproc_per_node=2 train.py \\\n    --max_steps 10\n!ls"),
    ]
    new, outcome = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert sources[0] == (
        "# (removed: ahead-of-time `optimum-cli export neuron`: load the model with `from_pretrained` "
        "and compile at run time)\nprint('done')"
    )
    assert sources[1].startswith("# (removed: neuron_parallel_compile pre-compilation")
    assert sources[1].endswith(")\n!ls") and "--max_steps" not in sources[1]
    changes = [c.message for c in outcome.result.changes]  # type: ignore[attr-defined]
    assert changes == ["removed a `optimum-cli export neuron` step", "removed a `neuron_parallel_compile` step"]


def test_xla_variables_leave_a_continued_command_whole() -> None:
    cells = [
        ("code", "!XLA_USE_BF16=1 PJRT_DEVICE=NEURON \\\n    torchrun --nproc_per_node=2 train.py \\\n    --epochs 1"),
        ("code", "!NEURON_CC_FLAGS='-O1' XLA_USE_BF16=1 \\\r\n    python train.py"),
    ]
    new, outcome = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    # train.py is not in the notebook: a TODO above each line says where its dtype goes now.
    todo = "# TODO(neuron-migrate NM009): `XLA_USE_BF16` set this child process's precision"
    assert all(source.startswith(todo) for source in sources)
    commands = [source.split("\n", 1)[1] for source in sources]
    assert commands[0] == "!torchrun --nproc_per_node=2 train.py \\\n    --epochs 1"
    assert commands[1] == "!NEURON_CC_FLAGS='-O1' \\\r\n    python train.py"
    changes = [c.message for c in outcome.result.changes]  # type: ignore[attr-defined]
    assert changes == ["removed XLA_USE_BF16, PJRT_DEVICE from a shell command", "removed XLA_USE_BF16 from a shell command"]


def test_a_step_alone_in_a_block_leaves_a_statement() -> None:
    cells = [("code", "for name in models:\n    !optimum-cli export neuron --model {name} \\\n        out/{name}\nprint(1)")]
    new, _ = rewrite(nbformat.writes(build(cells)))
    source = "".join(json.loads(new)["cells"][0]["source"])
    assert source.startswith("for name in models:\n    pass  # (removed: ahead-of-time `optimum-cli export neuron`")
    assert source.endswith("run time)\nprint(1)")


def test_a_step_whose_output_is_assigned_is_left_for_review_not_claimed_removed() -> None:
    command = "log = !neuron_parallel_compile torchrun train.py \\\n        --max_steps 10"
    raw = nbformat.writes(build([("code", f"if warm:\n    {command}\nprint(log)")]))
    new, outcome = rewrite(raw)
    result = outcome.result  # type: ignore[attr-defined]
    marker = (
        "# TODO(neuron-migrate NM005): a `neuron_parallel_compile` step is old-stack work, "
        "but its output is assigned: remove it by hand"
    )
    assert "".join(json.loads(new)["cells"][0]["source"]) == f"if warm:\n    {marker}\n    {command}\nprint(log)"
    assert result.changes == []
    assert [(m.code, m.cell, m.line, m.column) for m in result.manual] == [("NM005", 1, 2, 5)]
    again, outcome = rewrite(new)
    assert again == new
    assert [(m.code, m.cell, m.line, m.column) for m in outcome.result.manual] == [("NM005", 1, 2, 5)]  # type: ignore[attr-defined]


def test_shell_steps_that_still_need_optimum_neuron_get_a_todo() -> None:
    """A training launch with optimum-neuron's flags, or its command line, stays as it is: the
    notebook must not claim there is nothing left to do."""
    launch = "!torchrun --nproc_per_node=2 run_clm.py \\\n    --tensor_parallel_size 2 --zero_1 True"
    serve = "!python -m vllm.entrypoints.openai.api_server --model out --tensor-parallel-size=2"
    cells = [
        ("code", launch),
        ("code", "!optimum-cli neuron consolidate out merged"),
        ("code", "!python eval.py --lr 1"),
        ("code", serve),  # another program's own flag of that name
    ]
    new, outcome = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(cell["source"]) for cell in json.loads(new)["cells"]]
    assert sources[0].startswith("# TODO(neuron-migrate NM020): this runs a script with optimum-neuron training flags (`--tensor_parallel_size`, `--zero_1`)")
    assert sources[0].endswith(launch)
    assert sources[1].startswith("# TODO(neuron-migrate NM020): `optimum-cli neuron consolidate` is optimum-neuron's command line")
    assert sources[2] == "!python eval.py --lr 1"
    assert sources[3] == serve
    assert [(m.code, m.cell) for m in outcome.result.manual] == [("NM020", 1), ("NM020", 2)]  # type: ignore[attr-defined]
    again, _ = rewrite(new)
    assert again == new


def test_a_model_sharded_over_neuroncores_loads_whole_in_a_kernel() -> None:
    """`num_cores=2` drove two NeuronCores from the kernel's one process; `DistributedConfig`
    needs a process per shard, which would fail to start in a kernel: one device and a TODO."""
    cells = [
        ("code", "from optimum.neuron import NeuronModelForCausalLM"),
        ("code", 'model = NeuronModelForCausalLM.from_pretrained("m", export=True, num_cores=2, sequence_length=256)'),
    ]
    new, outcome = rewrite(nbformat.writes(build(cells)))
    source = "".join(json.loads(new)["cells"][1]["source"])
    assert "DistributedConfig(" not in source.replace("`distributed_config=DistributedConfig(tp_size=2)`", "")
    assert "device_map=" in source
    assert source.startswith("# TODO(neuron-migrate NM021): `num_cores=2`: a notebook cannot shard this model")
    assert [m.code for m in outcome.result.manual] == ["NM021"]  # type: ignore[attr-defined]


def test_python_that_looks_like_ipython_syntax_is_migrated() -> None:
    cells = [
        ("code", "import torch_xla.core.xla_model as xm\nx = (a\n    % 2)\nprompt = '''Ready?\nGo.'''\nxm.mark_step()"),
        ("code", 'print("why?")  # %time? !ls\nobj?\n!pip install \\\n    torch'),
    ]
    new, _ = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert sources[0] == "x = (a\n    % 2)\nprompt = '''Ready?\nGo.'''"
    assert sources[1] == cells[1][1]


def test_python_timed_by_a_magic_is_migrated_and_keeps_the_magic() -> None:
    cells = [
        ("code", "import torch\nimport torch_xla.core.xla_model as xm"),
        ("code", "%time device = xm.xla_device()\nx = torch.ones(3, device=device)"),
        ("code", "%timeit -n 2 y = x * 2\n%time xm.mark_step()"),
        ("code", "for _ in range(2):\n    %time xm.mark_step()\nprint(xm.xrt_world_size())"),
        ("code", "%%timeit -n 1\ny = x * 2\nxm.mark_step()"),
        ("code", "%time  for i in range(2): print(i)\n%prun -s cumulative xm.xla_device()"),
    ]
    new, _ = rewrite(nbformat.writes(build(cells)))
    sources = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert sources[0] == "import os\n\nimport torch"  # nothing uses `xm` any more
    assert sources[1] == (
        '%time device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
        "x = torch.ones(3, device=device)"
    )
    assert sources[2] == "%timeit -n 2 y = x * 2"  # the step it timed is gone, and the magic with it
    assert sources[3] == 'for _ in range(2):\n    pass\nprint(int(os.environ.get("WORLD_SIZE", 1)))'
    assert sources[4] == "%%timeit -n 1\ny = x * 2"
    # A compound statement cannot follow a placeholder: that line stays as it was.
    assert sources[5] == "%time  for i in range(2): print(i)\n%prun -s cumulative device"


def test_file_cell_magic_is_a_file_of_its_own() -> None:
    raw = nbformat.writes(build([("code", "%%file train.py\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n")]))
    new, _ = rewrite(raw)
    source = "".join(json.loads(new)["cells"][0]["source"])
    assert source.startswith("%%file train.py\nimport torch\n")
    assert "xm." not in source


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("!XLA_USE_BF16=1 NEURON_CC_FLAGS='-O1' \\\n    torchrun t.py", "!NEURON_CC_FLAGS='-O1' \\\n    torchrun t.py"),
        ("!NEURON_CC_FLAGS='-O1' XLA_USE_BF16=1 \\\n    torchrun t.py", "!NEURON_CC_FLAGS='-O1' \\\n    torchrun t.py"),
        ("!XLA_USE_BF16=1 \\\n    PJRT_DEVICE=NEURON \\\n    torchrun t.py \\\n    --epochs 1", "!torchrun t.py \\\n    --epochs 1"),
        ("!A=1 \\\n    PJRT_DEVICE=NEURON \\\n    torchrun t.py", "!A=1 \\\n    torchrun t.py"),
        ("!!PJRT_DEVICE=NEURON python t.py", "!!python t.py"),
        ("!cd run && PJRT_DEVICE=NEURON python t.py", None),
        ("!optimum-cli export \\\n    neuron --model gpt2 out/", f"# (removed: {REMOVED_STEPS['optimum-cli export neuron']})"),
        ("!time XLA_USE_BF16=1 python t.py", "!time python t.py"),
        ("!env XLA_USE_BF16=1 A=1 python t.py", "!env A=1 python t.py"),
        ("!time neuron_parallel_compile python t.py", f"# (removed: {REMOVED_STEPS['neuron_parallel_compile']})"),
    ],
)
def test_shell_command_rewrites(command: str, expected: str | None) -> None:
    rewrite = rewrite_shell_command(command)
    assert (rewrite.text if rewrite else None) == expected


def test_shell_lines_that_run_or_fetch_old_stack_code_get_a_todo(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text("print('native')\n")
    (tmp_path / "old.py").write_text("import torch_xla.core.xla_model as xm\n")
    cells = [
        ("code", "!wget https://raw.githubusercontent.com/huggingface/optimum-neuron/main/examples/train.py"),
        ("code", "!torchrun --nproc_per_node=2 train.py --bf16 True"),
        ("code", '!python -c "import torch, neuronx_distributed_inference as nxdi; print(nxdi)"'),
        ("code", "!{BIN}/inference_demo --model-type llama run"),
        ("code", "!python clean.py --evaluation_strategy epoch --tpu_num_cores 8"),
        ("code", "!python old.py && python clean.py"),
        ("code", "!python -m torch_xla.distributed.xla_dist --tpu=$TPU --env=XLA_USE_BF16=1 -- python3 clean.py"),
        ("code", "!python xla_spawn.py --num_cores 8 clean.py --max_seq_length 128"),
        ("code", "%%writefile made.py\nprint('written here')"),
        ("code", "!python made.py\n!python clean.py\n!wget https://example.com/data.py"),
    ]
    path = tmp_path / "nb.ipynb"
    path.write_text(nbformat.writes(build(cells)))
    outcome = rewrite_notebook(path.read_text(), str(path), Options())
    assert outcome.result.error is None, outcome.result.error
    sources = ["".join(c["source"]) for c in json.loads(outcome.result.migrated)["cells"]]
    todo = "# TODO(neuron-migrate NM020): "
    assert sources[0].startswith(f"{todo}this fetches code of the old stack (`optimum-neuron`)")
    assert sources[1].startswith("# TODO(neuron-migrate NM091): this runs `train.py`, which is not beside this file")
    assert sources[2].startswith(f"{todo}this runs Python that imports `neuronx_distributed_inference`")
    assert sources[3].startswith(f"{todo}`inference_demo` is neuronx-distributed-inference's command line")
    assert sources[4].startswith(
        f"{todo}transformers 5 has none of `--evaluation_strategy`, `--tpu_num_cores`, and its parser stops on them"
    )
    assert sources[5].startswith("# TODO(neuron-migrate NM091): this runs `old.py`, which still imports the old stack")
    assert sources[6].startswith(f"{todo}`torch_xla.distributed.xla_dist` started the program on every TPU VM")
    assert sources[7].startswith(f"{todo}`xla_spawn.py` started the script on each TPU core")
    assert sources[8:] == [source for _, source in cells[8:]]  # its own script, a clean one, a download
    again = rewrite_notebook(outcome.result.migrated, str(path), Options())
    assert again.result.migrated == outcome.result.migrated
