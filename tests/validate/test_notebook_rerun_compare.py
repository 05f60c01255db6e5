"""`validate A.ipynb B.ipynb` without a kernel: normalising text, parsing numbers, pairing cells,
judging one cell's outputs, and the command line's refusals."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from neuron_migrate.validate.command import EXIT_DIVERGE, EXIT_ERROR, main
from neuron_migrate.validate.notebook_rerun import (
    DIFFERS,
    NEW_ERROR,
    SAME,
    Outputs,
    compare_outputs,
    first_text_difference,
    normalise,
    numbers_close,
    outputs_of,
    pair_cells,
    png_size,
)

RTOL, ATOL = 1e-4, 1e-6


def differs(saved: str, fresh: str) -> str | None:
    return first_text_difference(saved, fresh, RTOL, ATOL)


def test_device_names_addresses_durations_and_whitespace_are_normalised():
    assert normalise("tensor([1., 2.], device='xla:0')") == normalise("tensor([1., 2.])")
    assert normalise("tensor(0.5, device='neuron:0', grad_fn=<MulBackward0>)") == normalise(
        "tensor(0.5, grad_fn=<MulBackward0>)"
    )
    assert normalise("running on xla:0") == normalise("running on cpu")
    assert normalise("device(type='xla', index=0)") == normalise("device(type='cpu')")
    assert normalise("<object object at 0x7f3a2c1d0e10>") == normalise(
        "<object object at 0x7f00deadbeef>"
    )
    assert normalise("Wall time: 20.5 μs") == normalise("Wall time: 1.2 ms")
    assert normalise("2026-12-07 13:00:01,123 saved") == normalise("2026-12-08T09:30:00 saved")
    assert normalise("a\n   b\tc ") == "a b c"


def test_numbers_within_tolerance_are_the_same_and_integers_must_be_equal():
    assert numbers_close("1.00000", "1.00005", RTOL, ATOL)
    assert not numbers_close("1.0", "1.001", RTOL, ATOL)
    assert numbers_close("0.0", "5e-7", RTOL, ATOL)
    assert not numbers_close("10", "11", 0.5, 0.5)  # integers exactly, whatever the tolerance
    assert numbers_close("1", "1.", RTOL, ATOL)
    assert numbers_close("nan", "nan", RTOL, ATOL) and not numbers_close("nan", "1", RTOL, ATOL)
    assert numbers_close("-inf", "-inf", RTOL, ATOL) and not numbers_close("inf", "-inf", 1, 1)


def test_tensor_reprs_compare_numbers_whatever_their_padding_and_device():
    saved = "tensor([[ 0.1234, -1.5000],\n        [10.0000,  2.0000]], device='xla:0')"
    fresh = "tensor([[ 0.12340001, -1.5],\n [10., 2.]])"
    assert differs(saved, fresh) is None
    assert differs("tensor([1., 2.], dtype=torch.bfloat16)", "tensor([1., 2.])") is not None
    detail = differs("tensor([1.0000, 2.0000])", "tensor([1.0000, 2.5000])")
    assert detail == "2.0000 saved, 2.5000 now, after 'tensor([1.0000, '"


def test_the_first_differing_value_is_named():
    saved = "step 0 loss 1.055536\nstep 1 loss 0.812345\n"
    detail = differs(saved, "step 0 loss 1.055536\nstep 1 loss 0.912345\n")
    assert detail == "0.812345 saved, 0.912345 now, after '…p 0 loss 1.055536 step 1 loss '"
    assert differs("accuracy 97%", "accuracy 96%") == "97 saved, 96 now, after 'accuracy '"
    assert differs("done", "failed") == "'done' saved, 'failed' now"


def test_names_versions_and_words_keep_their_digits_as_text():
    assert differs("conv1 layer", "conv2 layer") is not None
    assert differs("torch 2.9.0", "torch 2.9.1") is not None
    assert differs("inference", "inference") is None


def test_the_torch_build_and_the_launchers_banner_are_what_the_migration_changes_by_design():
    assert differs("'2.9.0+cu128'", "'2.13.0+cpu'") is None  # torch.__version__, either stack
    assert differs("torch 2.1.0+libtpu", "torch 2.13.0.dev20261201+cu130") is None
    assert differs("numpy 2.1.0", "numpy 2.3.0") is not None  # no build label: another library
    saved = "process 0 xla:0\n"
    assert differs(saved, "Launching training on CPU.\nprocess 0 cpu\n") is None
    assert differs(saved, "Launching training on 2 GPUs.\nprocess 0 cuda:0\n") is None
    assert differs("Launching training on CPU.\n", "") is None
    assert differs(saved, "Launching training on CPU. process 1 cpu") is not None


def test_missing_or_extra_numbers_differ():
    assert differs("a 1 2", "a 1") is not None
    assert differs("a 1", "a 1 2") is not None


def png(width: int, height: int) -> str:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    data = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(header)) + chunk
    return base64.b64encode(data + struct.pack(">I", zlib.crc32(chunk))).decode()


def test_images_are_compared_by_size():
    assert png_size(png(640, 480)) == (640, 480)
    assert png_size(base64.b64encode(b"not a png at all, clearly").decode()) is None
    cell = new_code_cell(
        "plot()",
        outputs=[
            new_output("display_data", data={"image/png": png(640, 480), "text/plain": "<Figure>"})
        ],
    )
    assert outputs_of(cell).images == ("image/png 640x480",)
    smaller = Outputs(images=("image/png 320x240",))
    assert compare_outputs(outputs_of(cell), smaller, RTOL, ATOL) == (
        DIFFERS,
        "images image/png 640x480 saved, image/png 320x240 now",
    )


def test_stdout_is_joined_across_chunks_and_stderr_is_left_out():
    saved = new_code_cell(
        outputs=[
            new_output("stream", name="stdout", text="loss 0."),
            new_output("stream", name="stdout", text="5\n"),
            new_output("stream", name="stderr", text="UserWarning: xla is deprecated\n"),
            new_output("execute_result", data={"text/plain": "3"}, execution_count=1),
        ]
    )
    fresh = new_code_cell(
        outputs=[
            new_output("stream", name="stdout", text="loss 0.5\n"),
            new_output("execute_result", data={"text/plain": "3"}, execution_count=1),
        ]
    )
    assert outputs_of(saved) == outputs_of(fresh)
    assert compare_outputs(outputs_of(saved), outputs_of(fresh), RTOL, ATOL) == (SAME, "")


def test_errors():
    error = Outputs(errors=("ZeroDivisionError: division by zero",))
    assert compare_outputs(Outputs(text="1"), error, RTOL, ATOL) == (
        NEW_ERROR,
        "ZeroDivisionError: division by zero",
    )
    assert compare_outputs(error, error, RTOL, ATOL) == (SAME, "")
    verdict, detail = compare_outputs(error, Outputs(), RTOL, ATOL)
    assert verdict == DIFFERS and "ZeroDivisionError" in detail


def test_cells_pair_by_position_or_else_by_source_in_order():
    assert pair_cells(["a", "b"], ["x", "y"]) == [(0, 0), (1, 1)]
    original = ["import torch_xla", "model = Net()", "train(model, lr=0.1)", "print(acc)"]
    migrated = [
        "import torch",
        "model = Net()",
        "print('hello')",
        "train(model, lr=0.1)",
        "print(acc)",
    ]
    assert pair_cells(original, migrated) == [(0, 0), (1, 1), (None, 2), (2, 3), (3, 4)]
    assert pair_cells(original, migrated[:1] + migrated[3:]) == [(0, 0), (1, None), (2, 1), (3, 2)]


def notebook(path: Path, *cells: nbformat.NotebookNode) -> Path:
    nbformat.write(new_notebook(cells=list(cells)), path)
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--nproc", "2"], "--nproc does not apply to notebooks"),
        (["--localize"], "--localize does not apply to notebooks"),
        (["--compile-stats"], "--compile-stats does not apply to notebooks"),
        (["--", "--epochs", "1"], "arguments after `--` do not apply to notebooks"),
        (["--migrated-cwd", "/no/such/dir"], "/no/such/dir: no such directory"),
    ],
)
def test_options_for_programs_are_refused_for_notebooks(tmp_path, capsys, extra, message):
    a = notebook(tmp_path / "a.ipynb", new_code_cell("1"))
    code = main(["validate", str(a), str(a), *extra])
    err = capsys.readouterr().err
    assert code == EXIT_ERROR and message in err and len(err.strip().splitlines()) == 1


def test_unreadable_or_unrun_notebooks_are_one_line_errors(tmp_path, capsys):
    unrun = notebook(tmp_path / "unrun.ipynb", new_code_cell("1"))
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    for argv, message in [
        ([str(tmp_path / "none.ipynb"), str(unrun)], "none.ipynb: no such file"),
        ([str(broken), str(unrun)], "broken.ipynb: not a readable notebook"),
        ([str(unrun), str(unrun)], "unrun.ipynb: no saved outputs to compare with"),
        ([str(unrun), "new.py"], "give two notebooks"),
    ]:
        code = main(["validate", *argv])
        err = capsys.readouterr().err
        assert code == EXIT_ERROR, argv
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_table_and_json_of_a_run(tmp_path, capsys, monkeypatch):
    from neuron_migrate.validate import notebook_rerun
    from neuron_migrate.validate.notebook_rerun import CellResult, RerunResult

    result = RerunResult(
        [
            CellResult(1, "import torch", SAME),
            CellResult(2, "train(lr=0.5)", DIFFERS, "0.81 saved, 0.91 now, after 'loss '"),
            CellResult(3, "1 / 0", NEW_ERROR, "ZeroDivisionError: division by zero"),
        ]
    )
    monkeypatch.setattr(notebook_rerun, "rerun", lambda *args, **kwargs: result)
    a = notebook(tmp_path / "a.ipynb", new_code_cell("1"))
    assert main(["validate", str(a), str(a)]) == EXIT_DIVERGE
    assert capsys.readouterr().out.splitlines() == [
        "cell  source         verdict    first difference",
        "   1  import torch   same",
        "   2  train(lr=0.5)  differs    0.81 saved, 0.91 now, after 'loss '",
        "   3  1 / 0          new error  ZeroDivisionError: division by zero",
        "first cell that differs: 2 (train(lr=0.5)): differs",
    ]
    assert main(["validate", str(a), str(a), "--json"]) == EXIT_DIVERGE
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == EXIT_DIVERGE and document["first_difference"] == 2
    assert document["cells"][2] == {
        "number": 3,
        "first_line": "1 / 0",
        "verdict": "new error",
        "detail": "ZeroDivisionError: division by zero",
    }
