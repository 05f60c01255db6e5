"""The cell masker against IPython itself: the lines it masks are the lines IPython's input
transformer turns into calls, and masking is undone byte for byte."""

from __future__ import annotations

import ast
import itertools
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from IPython.core.inputtransformer2 import TransformerManager, leading_empty_lines

from neuron_migrate.core.notebook_cells import (
    Masked,
    Span,
    cell_magic,
    magic_spans,
    mask,
    writes_python_file,
    written_script,
)


def ipython_spans(cell: str) -> list[tuple[int, int]]:
    """(first, last) line of each piece of the cell that IPython's transformer replaces by a call.

    The transformer replaces one piece at a time by one line; stepping through it the same way
    tells which original lines each new line stands for."""
    manager = TransformerManager()
    lines = (cell if cell.endswith("\n") else cell + "\n").splitlines(keepends=True)
    kept = leading_empty_lines(lines)
    offset = len(lines) - len(kept)
    for transform in [*manager.cleanup_transforms[1:], *manager.line_transforms]:
        assert len(transform(kept)) == len(kept), "a prompt or a %% cell magic: not a case here"
        kept = transform(kept)
    origin = [(n + offset, n + offset, False) for n in range(len(kept))]
    while True:
        changed, new = manager.do_one_token_transform(kept)
        if not changed:
            break
        start = next(n for n, (a, b) in enumerate(zip(kept, new, strict=False)) if a != b)
        end = len(kept) - (len(new) - start)  # the piece became the one line new[start]
        assert kept[end + 1 :] == new[start + 1 :]
        origin[start : end + 1] = [(origin[start][0], origin[end][1], True)]
        kept = new
    assert "".join(kept) == manager.transform_cell(cell)
    return [(first, last) for first, last, replaced in origin if replaced]


def ipython_parses(cell: str) -> bool:
    try:
        ast.parse(TransformerManager().transform_cell(cell))
    except SyntaxError:
        return False
    return True


_NUMBERS = itertools.count()


def named(span: Span) -> str:
    """A placeholder of its own for each command, as `rewrite` uses them."""
    return f"_nm_magic_test_{next(_NUMBERS)}"


CELLS = [
    # the magics and shell lines of real notebooks
    "%pip install torch\nimport torch\n!nvidia-smi\n",
    "!pip install -q transformers\n!!ls\n%env PJRT_DEVICE=NEURON\n%env\n%matplotlib inline\n",
    "%time y = f(x)\n%timeit -n1 g()\nx = 1\n",
    "files = !ls *.py\nout = %pwd\nprint(files, out)\n",
    "x: list = !ls\nd[k] = %env HOME\n",
    "(a,\n b) = !ls\nx = \\\n!ls\n",
    "if True:\n    !ls\n    x = %time 1\n    for i in range(2):\n        %env A=1\n",
    "def f(x):\n    %time y = 1\n    return x\n",
    # commands continued with a backslash are one command
    "!neuron_parallel_compile torchrun --nproc_per_node=2 train.py \\\n    --epochs 1 \\\n    --lr 1e-4\nprint(1)\n",
    "!echo a \\\nb\n!echo c\n",
    "%env A=1 \\\n  B=2\nx = 1\n",
    "x = !echo a \\\n  b\ny = 2\n",
    "if x:\n    !echo a \\\n--flag\n    y = 1\n",
    "!echo 'it is \\\nstill the command' (\nx = 1\n",
    "!ls \\",
    # help
    "torch.nonzero?\n",
    "obj??\n?obj\n??obj\n%time?\n",
    "x = obj.attr?\n",
    "f(1,\n  2).x?\n",
    "if x:\n    obj?\n",
    "?\n",
    # Python that looks like IPython's syntax
    "x = (a\n    % 2)\n",
    "x = (a\n    % 2)\n!ls\n",
    "x = a \\\n    % 2\n!ls\n",
    'print("why?")\n!ls\n',
    "x = 1  # why?\n%env A=1\n",
    "# !ls and %time?\n!ls\n",
    "x != 1\ny %= 2\nz = x if y else w\n!ls\n",
    's = """\n!not a command\n%nor this?\n"""\n!ls\n',
    "d = {\n    'k': '!v',\n    'w': 3 % 2,\n}\n%time d\n",
    "s = 'a \\\n!b'\n!ls\n",
    "f'{x!r}?'\n!ls\n",
    "x = '%s' % y\n%env A=1\n",
    "x = [\n    1,\n    # ?\n]\n!ls\n",
    # IPython's autocall escapes
    "/print 1 2\n,f a b\n;f a b\n",
    "/ 2\n",
    # odd but IPython's
    "% 2\n",
    "x = % a\n",
    "x = !ls foo?\n",
    "!echo (\nfoo?\n",
    "!echo ) (\nx = 1\n",
    "x = 1\n%%bash\n",
    "x = 1; !ls\n",
    "\n\n!ls\n\nx = 1\n",
    "x = '''\n!ls",
    '!echo """\nx = 1\n!ls\n',
]


@pytest.mark.parametrize("cell", CELLS)
def test_the_lines_ipython_replaces_are_the_masked_lines(cell: str) -> None:
    assert [(s.first, s.last) for s in magic_spans(cell)] == ipython_spans(cell)


@pytest.mark.parametrize("cell", CELLS)
def test_masking_round_trips_and_parses_where_ipython_does(cell: str) -> None:
    masked = mask(cell, named)
    assert masked.text.count("\n") == cell.count("\n")
    assert masked.unmask() == cell
    if ipython_parses(cell):
        ast.parse(masked.text)
        ast.parse(mask(cell).text)


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("x = (a\n    % 2)\n", []),
        ('print("why?")\nx = 1  # why?\n', []),
        ("x != 1\ny %= 2\n", []),
        ("!cmd \\\n    --flag\n", [Span(0, 1, 0, "shell")]),
        ("obj?\nobj??\n?obj\n", [Span(n, n, 0, "help") for n in range(3)]),
        (
            "x = !ls\ny = %pwd\n!!ls\n",
            [
                Span(0, 0, 4, "shell", assigned=True),
                Span(1, 1, 4, "magic", assigned=True),
                Span(2, 2, 0, "shell"),
            ],
        ),
        ("for f in files:\n    %env F=1\n", [Span(1, 1, 4, "magic")]),
        ("/print 1\n", [Span(0, 0, 0, "call")]),
    ],
)
def test_spans(cell: str, expected: list[Span]) -> None:
    assert magic_spans(cell) == expected


def test_plain_python_comes_back_as_it_is() -> None:
    cell = "import torch\n\nx = torch.ones(2) % 2\nprint('why?')\n"
    masked = mask(cell, named)
    assert masked == Masked(cell) and masked.text is cell


def test_a_continued_command_keeps_its_line_count_and_line_endings() -> None:
    cell = "if x:\r\n    !cmd a \\\r\n  --flag \\\r\n  --other\r\n    y = 1\r\n"
    masked = mask(cell)
    assert masked.text == "if x:\r\n    (None\r\n\r\n)\r\n    y = 1\r\n"
    ast.parse(masked.text)
    (command,) = masked.commands
    assert command.text == "!cmd a \\\r\n  --flag \\\r\n  --other"
    assert mask(cell, named).unmask() == cell
    assert magic_spans(cell) == magic_spans(cell.replace("\r\n", "\n"))


def test_an_assigned_command_keeps_its_target() -> None:
    masked = mask("files = !ls \\\n  *.py\nprint(files)\n", lambda span: "_nm")
    assert masked.text == "files = (_nm\n)\nprint(files)\n"


def test_unmask_with_new_text_for_a_command() -> None:
    masked = mask("import os\n!echo a \\\n  b\n%env A=1\n", named)
    shell, _ = masked.commands
    rewritten = masked.text.replace("import os\n", "")
    assert masked.unmask(rewritten, {shell: "# gone"}) == "# gone\n%env A=1\n"


def test_unmask_refuses_lost_or_shared_placeholders() -> None:
    masked = mask("!ls\n!pwd\n", named)
    with pytest.raises(ValueError, match="lost"):
        masked.unmask(masked.text.splitlines()[0])
    with pytest.raises(ValueError, match="placeholder of its own"):
        mask("!ls\n!pwd\n").unmask()


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("%%time\nx = 1", ("time", "")),
        ("\n# setup\n%%writefile train.py\nimport torch\n", ("writefile", "train.py")),
        ("%%bash\necho hi", ("bash", "")),
        ("x = 1\n%%time\n", None),
        ("%time x = 1\n", None),
        ("", None),
    ],
)
def test_cell_magic(cell: str, expected: tuple[str, str] | None) -> None:
    assert cell_magic(cell) == expected


def test_writes_python_file() -> None:
    assert writes_python_file("%%writefile train.py\nimport torch\n")
    assert writes_python_file("%%file -a src/train.py\nimport torch\n")
    assert not writes_python_file("%%writefile run.sh\necho hi\n")
    assert not writes_python_file("%%time\nx = 1\n")


def test_the_script_of_a_writefile_cell_keeps_its_positions_and_its_first_line() -> None:
    cell = "# the training script\r\n  %%writefile {work_dir}/train.py\r\nimport torch\r\n"
    script = written_script(cell)
    assert script is not None
    assert (
        script.text
        == "# the training script\r\n  # %%writefile {work_dir}/train.py\r\nimport torch\r\n"
    )
    assert script.unmask(script.text.replace("torch", "os")) == cell.replace("torch\r", "os\r")
    assert written_script("%%writefile notes.txt\ntorch\n") is None
    assert written_script("import torch\n") is None


# -- generated cells -----------------------------------------------------------------------------

_WORDS = st.sampled_from(["x", "obj", "torch.ones", "model.cuda", "f(a, b)", "d['k']", "1e-4", "2"])
_COMMAND_TEXT = st.text(alphabet="ab -=_*?!%#'\"()[]{}:,$/\\", max_size=12).filter(
    lambda text: not text.endswith("\\")
)
_STRINGS = st.sampled_from(
    ["'why?'", '"100%"', "'!ls'", '"a\\" ?"', "f'{x!r}'", "'%s' % x", "r'\\d?'"]
)


@st.composite
def python_lines(draw: st.DrawFn) -> list[str]:
    word, other, string = draw(_WORDS), draw(_WORDS), draw(_STRINGS)
    return draw(
        st.sampled_from(
            [
                [f"y = {word}"],
                [f"print({string})"],
                [f"z = {word} != {other}", f"z %= {other}"],
                [f"w = ({word}", f"    % {other})"],
                [f"w = {word} \\", f"    % {other}"],
                [f"v = [{word},", f"     {string},", "]"],
                ['s = """', f"!{word}", f"%{word}?", '"""'],
                [f"u = {word}  # {string}?"],
                [f"# !{word} %{word} ?"],
                [f"t = {string} \\", f"    + {string}"],
                [""],
            ]
        )
    )


@st.composite
def ipython_lines(draw: st.DrawFn) -> list[str]:
    word, text = draw(_WORDS), draw(_COMMAND_TEXT)
    head = draw(
        st.sampled_from(
            [
                f"!{text}",
                f"!!ls {text}",
                f"%env A={text}",
                f"%time {word}",
                f"x = !{text}",
                f"x = %pwd {text}",
                f"{word}?",
                f"{word}??",
                f"?{word}",
                "%%time",
                f"%matplotlib {text}",
            ]
        )
    )
    continued = draw(
        st.lists(st.tuples(st.sampled_from(["", "  ", "    "]), _COMMAND_TEXT), max_size=2)
    )
    if continued and not head.endswith("?"):
        return (
            [head + " \\"]
            + [f"{pad}{text} \\" for pad, text in continued[:-1]]
            + ["".join(continued[-1])]
        )
    return [head]


@st.composite
def cells(draw: st.DrawFn) -> str:
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        piece = draw(st.one_of(python_lines(), ipython_lines()))
        if draw(st.booleans()):  # inside a block: every line that starts a statement is indented
            body = draw(st.one_of(python_lines(), ipython_lines()))
            piece = [draw(st.sampled_from(["if x:", "for i in y:", "def f():"]))] + [
                "    " + line for line in body
            ]
        lines += piece
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


_PROMPT = re.compile(r"^\s*(>>>|\.\.\.|In \[)", re.MULTILINE)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(cells())
def test_generated_cells_are_masked_where_ipython_transforms(cell: str) -> None:
    assume(not cell.lstrip().startswith("%%") and not _PROMPT.search(cell))
    masked = mask(cell, named)
    assert masked.unmask() == cell
    assert masked.text.count("\n") == cell.count("\n")
    crlf = cell.replace("\n", "\r\n")
    assert mask(crlf, named).unmask() == crlf
    try:
        parses = ipython_parses(cell)
        expected = ipython_spans(cell)
    except SyntaxError:  # IPython's tokenizer refused the cell (say, a bad dedent)
        return
    if parses:
        assert [(s.first, s.last) for s in magic_spans(cell)] == expected
        ast.parse(masked.text)
