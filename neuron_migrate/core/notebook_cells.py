"""IPython's own syntax in notebook cells (`%` magics, `!` shell commands, `?` help), found once.

`rewrite`, `check` and the Jupyter extension read code cells as Python. The commands IPython would
turn into `get_ipython()` calls are found here as IPython finds them, by Python tokens: a `%` that
continues an expression, or a `?` in a string or a comment, is Python; a command continued with a
trailing backslash is one command. `mask` puts a placeholder in place of each command and keeps
every line where it was, so positions in the masked text are true in the cell, and `unmask` puts
the commands back byte for byte. Of a line magic that runs Python (`%time x = f()`), only the magic
is masked: the Python after it stays Python, to be read and rewritten as the kernel runs it.
"""

from __future__ import annotations

import ast
import bisect
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# Cell magics whose body is Python, run by IPython or by a Python interpreter (`%%trainium` is
# neuron-migrate's own: it runs its body in the kernel where a Neuron device is present).
PYTHON_CELL_MAGICS = frozenset(
    {"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit", "trainium"}
)
# Line magics that run the Python after them: `%time x = f()`, `%timeit -n 3 f()`. By magic, its
# options that stand alone and those that take a value (`-n 3`, `-n3`), as IPython parses them.
PYTHON_LINE_MAGICS: dict[str, tuple[str, str]] = {"time": ("", ""), "timeit": ("tcqo", "nrp"), "prun": ("rq", "DlsT")}
# Cell magics that write their body to a file (`%%file` is IPython's other name for it).
WRITEFILE_MAGICS = frozenset({"file", "writefile"})


def cell_magic(source: str) -> tuple[str, str] | None:
    """`(name, rest of its line)` when the cell is a `%%` cell magic. Comment lines before the
    `%%` line are passed over: IPython would not run such a cell, and it is not Python either."""
    for line in source.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("%%"):
            name, _, rest = stripped[2:].partition(" ")
            return name, rest.strip()
        return None
    return None


def writes_python_file(source: str) -> bool:
    """Whether the cell is `%%writefile x.py`: a script that the notebook writes, then runs."""
    magic = cell_magic(source)
    return magic is not None and magic[0] in WRITEFILE_MAGICS and magic[1].endswith(".py")


def written_script(source: str) -> Masked | None:
    """The script a `%%writefile x.py` cell writes, as Python: the `%%` line made a comment, so
    that every position in the script is the same position in the cell, and `unmask` puts the
    line back. None for any other cell."""
    if not writes_python_file(source):
        return None
    lines = _Lines(source)
    number = next(n for n, line in enumerate(lines.text) if line.lstrip().startswith("%%"))
    column = len(lines.text[number]) - len(lines.text[number].lstrip())
    start, end = lines.starts[number] + column, lines.end(number)
    line = source[start:end]
    command = Command(Span(number, number, column, "magic"), line, f"# {line}")
    return Masked(f"{source[:start]}# {line}{source[end:]}", (command,))


@dataclass(frozen=True)
class Span:
    """One command in IPython's syntax: `first`..`last` are 0-based physical lines (more than one
    when the command goes on with a trailing backslash, or a help target spans brackets);
    `column` is where the command starts on its first line (after the indentation, or after
    `x = ` when its output is `assigned`, as in `x = !ls`)."""

    first: int
    last: int
    column: int
    kind: str  # "shell" (`!`, `!!`), "magic" (`%`), "help" (`?x`, `x?`), "call" (`/f`, `,f`, `;f`)
    assigned: bool = False


# -- Python tokens, as far as IPython looks at them ----------------------------------------------

_PREFIX = r"(?:[rR][bBfFtT]?|[bBfFtT][rR]?|[uU])?"
_WHITESPACE = re.compile(r"[ \t\f]*")
# The alternatives and their order follow the standard library's tokenize module, so that
# IPython's syntax, which Python has no token for, splits into the same pieces there and here.
_TOKEN = re.compile(
    r"(?P<continuation>\\\r?\n)"
    r"|(?P<comment>#[^\r\n]*)"
    rf"|(?P<triple>{_PREFIX}(?:'''|\"\"\"))"
    r"|(?P<number>(?:0[xXoObB][\da-fA-F_]+|\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][-+]?\d[\d_]*)?[jJ]?)"
    r"|(?P<newline>\r?\n)"
    r"|(?P<op>\*\*=?|//=?|>>=?|<<=?|->|:=|\.\.\.|!=|[-+*/%&|^@=<>]=|[-+*/%&|^@=<>~:;,.()\[\]{}])"
    rf"|(?P<string>{_PREFIX}(?:'[^\n'\\]*(?:\\.[^\n'\\]*)*(?:'|\\\r?\n)"
    r"|\"[^\n\"\\]*(?:\\.[^\n\"\\]*)*(?:\"|\\\r?\n)))"
    r"|(?P<name>\w+)"
    r"|(?P<end>\Z)"
)
_TRIPLE_END = {quote: re.compile(r"\\[\s\S]|" + quote) for quote in ("'''", '"""')}
_STRING_GOES_ON = {
    quote: re.compile(rf"[^\n{quote}\\]*(?:\\.[^\n{quote}\\]*)*(?:{quote}|\\\r?\n)")
    for quote in "'\""
}
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")


@dataclass(frozen=True)
class _Token:
    kind: str  # a group of _TOKEN, or "other" for a character Python has no token for (`!`, `?`)
    text: str
    start: int  # offset in the cell


def _string_end(source: str, token: re.Match[str]) -> tuple[int, bool]:
    """Where a string that starts with `token` ends (the end of the cell if it never does), and
    whether it is a one-quote string continued with a backslash onto a line that does not close
    it: the tokenizer then takes that whole line, line break included, as an error."""
    text = token.group()
    if token.lastgroup == "triple":
        for match in _TRIPLE_END[text[-3:]].finditer(source, token.end()):
            if not match.group().startswith("\\"):
                return match.end(), False
        return len(source), False
    position = token.end()
    quote = text.lstrip("rRbBfFtTuU")[0]
    while text.endswith("\n"):
        goes_on = _STRING_GOES_ON[quote].match(source, position)
        if goes_on is None:
            newline = source.find("\n", position)
            return (len(source) if newline < 0 else newline + 1), True
        text, position = goes_on.group(), goes_on.end()
    return position, False


_BLANK = re.compile(r"[ \t\f]*(?:#[^\r\n]*)?(?:\r?\n|\Z)")


def _logical_line(source: str, position: int) -> tuple[list[_Token], int]:
    """The tokens of the logical line that starts at `position`, and where the next one starts."""
    tokens: list[_Token] = []
    depth = 0  # as the tokenizer counts: a stray `)` makes it negative
    while True:
        position = _WHITESPACE.match(source, position).end()  # type: ignore[union-attr]
        match = _TOKEN.match(source, position)
        if match is None:
            tokens.append(_Token("other", source[position], position))
            position += 1
            continue
        kind = match.lastgroup or ""
        if kind == "end" or (kind == "newline" and depth <= 0):
            return tokens, match.end()
        end, broken = match.end(), False
        if kind in ("triple", "string"):
            kind = "string"
            end, broken = _string_end(source, match)
        elif kind == "op" and match.group() in _OPEN:
            depth += 1
        elif kind == "op" and match.group() in _CLOSE:
            depth -= 1
        if kind not in ("newline", "continuation"):
            tokens.append(_Token(kind, source[position:end], position))
        position = end
        if broken and depth <= 0 and _BLANK.match(source, position):
            return (
                tokens,
                position,
            )  # the tokenizer ends the line at a blank line after such a string


# -- the three ways IPython recognises its syntax -------------------------------------------------

_ESCAPES = {"!": "shell", "?": "help", "%": "magic", ",": "call", ";": "call", "/": "call"}
# IPython's pattern for `obj?` / `obj.attr??` / `%magic?` at the end of a logical line.
_HELP_TARGET = re.compile(r"%{0,2}(?!\d)[\w*]+(?:\.(?!\d)[\w*]+|\[-?[0-9]+\])*\?\??\Z")


class _Lines:
    """Offsets <-> (line, column) in a cell; a final newline does not start another line."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.text = source.split("\n")
        if len(self.text) > 1 and self.text[-1] == "":
            self.text.pop()
        self.starts = [0]
        for line in self.text[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def at(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset) - 1
        return line, offset - self.starts[line]

    def continued_to(self, line: int) -> int:
        """The last line of a command that starts on `line` and goes on with trailing backslashes
        (before a `\\r\\n` line ending too, where IPython would leave a stray backslash)."""
        while line + 1 < len(self.text) and self.text[line].rstrip("\r").endswith("\\"):
            line += 1
        return line

    def end(self, line: int) -> int:
        """The offset of the end of `line`, before its line ending."""
        return self.starts[line] + len(self.text[line].rstrip("\r"))


def _help(lines: _Lines, tokens: list[_Token]) -> Span | None:
    """`obj?`, `obj.attr??`, `%magic?`: a logical line whose last token is a `?`."""
    last = tokens[-1]
    if last.kind != "other" or last.text != "?":
        return None
    first_line, column = lines.at(tokens[0].start)
    last_line = lines.at(last.start)[0]
    if not _HELP_TARGET.search(lines.source[tokens[0].start : lines.end(last_line)].rstrip()):
        return None
    return Span(first_line, last_line, column, "help")


def _escape(lines: _Lines, tokens: list[_Token]) -> Span | None:
    """`!cmd`, `%magic`, `?obj`, and the autocall escapes `/f`, `,f`, `;f`: the first token."""
    first = tokens[0]
    if first.text not in _ESCAPES or first.kind != ("other" if first.text in "!?" else "op"):
        return None
    line, column = lines.at(first.start)
    last = lines.continued_to(line)
    if first.text == "/":  # IPython refuses `/` without a callable name after it
        pieces = [lines.text[n].rstrip() for n in range(line, last + 1)]
        joined = " ".join([p[:-1] for p in pieces[:-1]] + pieces[-1:])[column + 1 :]
        if not joined.partition(" ")[0]:
            return None
    return Span(line, last, column, _ESCAPES[first.text])


def _first_assignment(tokens: list[_Token]) -> int | None:
    """The index of the first `=` outside brackets, as IPython looks for it."""
    depth = 0
    for index, token in enumerate(tokens):
        if token.kind != "op":
            continue
        if token.text == "=" and depth == 0:
            return index
        if token.text in _OPEN:
            depth += 1
        elif token.text in _CLOSE:
            depth = max(depth - 1, 0)
    return None


def _assignment(lines: _Lines, tokens: list[_Token]) -> Span | None:
    """`x = !cmd` and `x = %magic`: the first `=` outside brackets, followed by `!` or `%name`."""
    index = _first_assignment(tokens)
    after = tokens[index + 1 : index + 3] if index is not None else []
    if index is None or not after:
        return None
    line, column = lines.at(after[0].start)
    if after[0].kind == "other" and after[0].text == "!":
        equals_line = lines.at(tokens[index].start)[0]
        if lines.text[equals_line].strip().startswith("="):
            return None
        return Span(line, lines.continued_to(line), column, "shell", assigned=True)
    if after[0].kind == "op" and after[0].text == "%" and after[1:] and after[1].kind == "name":
        return Span(line, lines.continued_to(line), column, "magic", assigned=True)
    return None


def _parses(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like: not ours to report
            ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def magic_spans(source: str) -> list[Span]:
    """The commands in IPython's syntax in a cell, in order. A cell that parses as Python has
    none (IPython's syntax is never valid Python), which keeps plain cells fast. A `%%` first
    line is found as a line magic; what its body is, is for the caller (see `cell_magic`)."""
    if _parses(source):
        return []
    lines = _Lines(source)
    spans: list[Span] = []
    position = 0
    while position < len(source):
        tokens, after = _logical_line(source, position)
        span = None
        if tokens and tokens[0].kind != "comment":
            span = _help(lines, tokens) or _escape(lines, tokens) or _assignment(lines, tokens)
        if span is None:
            position = after
            continue
        spans.append(span)
        # Tokens after the command were read as Python; IPython reads on after the command.
        if span.last + 1 >= len(lines.text):
            break
        position = lines.starts[span.last + 1]
    return spans


# -- masking -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    span: Span
    text: str  # as written: from the span's column to the end of its last line
    mask: str  # what stands in its place in the masked text
    # A line magic that runs the Python after it (`%time x = f()`): `text` is the magic and its
    # options only, `mask` a statement (`placeholder; `) before the Python, which stays Python.
    prefix: bool = False


@dataclass(frozen=True)
class Masked:
    """A cell with its commands masked; `text` is the cell itself when it has none."""

    text: str
    commands: tuple[Command, ...] = ()

    def unmask(self, text: str | None = None, replace: Mapping[Command, str] | None = None) -> str:
        """`text` (the masked text, or what a rewrite made of it) with each command back in place
        of its mask, or the text `replace` gives for it. Needs placeholders that occur nowhere
        else, and every mask still in `text`: ValueError otherwise."""
        text = self.text if text is None else text
        if not self.commands:
            return text
        text, kept = self._without_emptied_prefixes(text)
        if not kept:
            return text
        back = {c.mask: (replace or {}).get(c, c.text) for c in kept}
        if len(back) != len(kept):
            raise ValueError("unmask needs a placeholder of its own for each command")
        pattern = re.compile("|".join(re.escape(m) for m in sorted(back, key=len, reverse=True)))
        found: list[str] = []

        def restore(match: re.Match[str]) -> str:
            found.append(match.group())
            return back[match.group()]

        restored = pattern.sub(restore, text)
        if sorted(found) != sorted(back):
            raise ValueError("a masked command was lost or repeated")
        return restored

    def _without_emptied_prefixes(self, text: str) -> tuple[str, list[Command]]:
        """`text` without the lines where a rewrite removed the statement a `%time` ran (only its
        placeholder is left there): a `pass` stands in where the block would be empty. Also the
        commands still to put back."""
        kept: list[Command] = []
        for command in self.commands:
            if not command.prefix or command.mask in text:
                kept.append(command)
                continue
            name = re.escape(command.mask.removesuffix("; "))
            alone = re.compile(rf"^([ \t]*){name}([ \t]*(?:#[^\r\n]*)?)(?:\r?\n|\Z)", re.M).search(text)
            if alone is None:
                kept.append(command)  # lost: the check below says so
                continue
            start = alone.start()
            if alone.end() == len(text) and not alone.group().endswith("\n"):
                start = len(text[:start].removesuffix("\n").removesuffix("\r"))  # the last line: its line break goes
            without = text[:start] + text[alone.end() :]
            if alone.group(2).strip() or not _parses(without):
                without = f"{text[: alone.start()]}{alone.group(1)}pass{text[alone.end(2) :]}"
            text = without
        return text, kept


def mask(source: str, placeholder: Callable[[Span], str] = lambda span: "None") -> Masked:
    """The cell with each command replaced by `placeholder(span)`, an expression (a command can
    be the value of an assignment). A command over several lines becomes `(placeholder` on its
    first line, empty lines, and `)` on its last, so every line keeps its number and its line
    ending."""
    spans = magic_spans(source)
    if not spans:
        return Masked(source)
    lines = _Lines(source)
    pieces: list[str] = []
    commands: list[Command] = []
    done = 0
    for span in spans:
        start, end = lines.starts[span.first] + span.column, lines.end(span.last)
        name = placeholder(span)
        python = _python_after_magic(source[start:end], name) if span.kind == "magic" and not span.assigned else None
        if python is not None:
            pieces += [source[done:start], f"{name}; "]
            commands.append(Command(span, source[start : start + python], f"{name}; ", prefix=True))
            done = start + python
            continue
        if span.first == span.last:
            chunk = name
        else:
            endings = (
                "\r\n" if lines.text[n].endswith("\r") else "\n"
                for n in range(span.first, span.last)
            )
            chunk = f"({name}{''.join(endings)})"
        pieces += [source[done:start], chunk]
        commands.append(Command(span, source[start:end], chunk))
        done = end
    pieces.append(source[done:])
    return Masked("".join(pieces), tuple(commands))


def _python_after_magic(command: str, name: str) -> int | None:
    """Where the Python starts in a `%time x = f()` or `%timeit -n 3 f()` line (an offset in
    `command`), where it is one statement that parses after `name; `; None for other magics."""
    magic = re.match(r"%(\w+)[ \t]+", command)
    if magic is None or magic.group(1) not in PYTHON_LINE_MAGICS or "\n" in command:
        return None
    flags, valued = PYTHON_LINE_MAGICS[magic.group(1)]
    position = magic.end()
    while command.startswith("-", position):
        word = command[position:].split(None, 1)[0]
        if word[1:] and all(letter in flags for letter in word[1:]):
            taken = 1
        elif word[1:2] and word[1] in valued:
            taken = 1 if len(word) > 2 else 2  # `-n3`, or `-n 3`
        else:
            break  # `%timeit -x`: Python after all
        for _ in range(taken):
            position = re.compile(r"\S*[ \t]*").match(command, position).end()  # type: ignore[union-attr]
        if position >= len(command):
            return None
    python = command[position:]
    if not python.strip() or not _parses(f"{name}; {python}"):
        return None
    return position
