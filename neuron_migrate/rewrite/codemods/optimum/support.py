"""What the optimum-neuron, torch_neuronx and neuronx-distributed codemods share.

Their targets are classes of other libraries (`from transformers import Trainer`): renames of
imported names that keep a user's alias; keyword tables; and a little data flow for kwargs given
through `**dict` unpacking. Their per-file state lives in the migration context.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.cst_children import children
from neuron_migrate.core.names import RUN_TIME_IMPORTS, ImportTable
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    MigrationContext,
    StatementHeaderVisitor,
    code_of,
    dotted_name,
    fix_trailing_comma,
    star_import_todo,
    string_value,
)

OPTIMUM = "optimum.neuron"
# The TODO for the Neuron platform query, which torch_neuronx, NxD and NxD Inference each export.
PLATFORM_TARGET = '`{name}()` named the Neuron platform (`"trn2"`, ...): ask `torch.accelerator` or your own config'


@dataclass
class FileState:
    """Per-file state shared by the codemods of this family."""

    renamed_locals: set[str] = field(default_factory=set)  # aliases that now name the new class
    handled: set[str] = field(default_factory=set)  # qualified old-stack names rewritten somewhere
    in_place: set[str] = field(
        default_factory=set
    )  # modules some old import line was rewritten into
    top_from: set[str] | None = None  # modules the original file from-imports at top level
    top_bound: set[str] | None = None  # qualified names its top-level imports bind
    named: set[str] = field(default_factory=set)  # roots some string was reported for
    types_only: set[str] | None = None  # names the original file reads only as types
    # Names it reads as values somewhere, otherwise, and asked for a method no `Auto*` factory has.
    held_as_values: tuple[set[str], set[str], set[str]] | None = None
    imported_by_name: set[int] = field(default_factory=set)  # ids of `import_module("...")` strings


def sequential_loading(ctx: MigrationContext) -> None:
    """`--target neuron`: load weights without transformers' thread pool (HF_DEACTIVATE_ASYNC_LOAD)."""
    if not ctx.target.neuron:
        return
    block = (
        "# Load checkpoints without transformers' loader threads (reported to hang on Neuron).\n"
        f'{ctx.os()}.environ.setdefault("HF_DEACTIVATE_ASYNC_LOAD", "1")\n'
    )
    if block not in ctx.module_prologue:
        ctx.module_prologue.append(block)


def _top_level_bound(source: str) -> set[str]:
    """Qualified names bound by the file's top-level imports (always run, unlike nested ones)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    table = ImportTable()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            table.add(node)
    return {binding.qualified for binding in table.all_bindings}


def _read_only_as_types(source: str) -> set[str]:
    """Names whose every read is a type: in `isinstance`/`issubclass` or an annotation."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    as_types: set[int] = set()
    for node in all_nodes(tree):
        spots: list[ast.AST] = []
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            spots.append(node.args[1])
        elif isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            spots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            spots.append(node.returns)
        for spot in spots:
            as_types.update(id(n) for n in ast.walk(spot) if isinstance(n, ast.Name))
    reads: dict[str, list[int]] = {}
    for node in all_nodes(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads.setdefault(node.id, []).append(id(node))
    return {name for name, ids in reads.items() if all(i in as_types for i in ids)}


# Classes whose counterparts take what they took: configurations, arguments and trainers (an
# `HfArgumentParser` of them is followed where it goes). Models are not: optimum-neuron's have
# methods and options of their own.
SETTINGS_CLASSES = ("Arguments", "Config", "Trainer")


def _held_as_values(source: str) -> tuple[set[str], set[str], set[str]]:
    """Names read as plain values somewhere (not called, not asked for an attribute, not a type:
    `auto_class = NeuronModelForCausalLM`, `{"llm": NeuronModel}`), names read otherwise, and
    names asked for a method an `Auto*` factory lacks (`NeuronModelForCausalLM.get_export_config`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), set(), set()
    direct: set[int] = set()
    foreign: set[int] = set()
    for node in all_nodes(tree):
        if isinstance(node, ast.Call):
            direct.add(id(node.func))
            if isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                direct.update(id(n) for n in ast.walk(node.args[1]))
        elif isinstance(node, ast.Attribute):
            (direct if node.attr in AUTO_METHODS else foreign).add(id(node.value))
        elif isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            direct.update(id(n) for n in ast.walk(node.annotation))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            direct.update(id(n) for n in ast.walk(node.returns))
        elif isinstance(node, ast.ClassDef):
            direct.update(id(n) for base in node.bases for n in ast.walk(base))
    reads = [node for node in all_nodes(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)]
    return (
        {node.id for node in reads if id(node) not in direct and id(node) not in foreign},
        {node.id for node in reads if id(node) in direct},
        {node.id for node in reads if id(node) in foreign},
    )


def _top_level_from_modules(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        and node.module
        and not node.level
        and node.names[0].name != "*"
    }


# -- keyword arguments --------------------------------------------------------------------------


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def make_arg(name: str, value: cst.BaseExpression | str) -> cst.Arg:
    if isinstance(value, str):
        value = cst.parse_expression(value)
    return cst.Arg(
        keyword=cst.Name(name),
        value=value,
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )


def with_args(call: cst.Call, args: Sequence[cst.Arg]) -> cst.Call:
    """`call` with `args`, keeping the layout of the original argument list.

    In a call laid out one argument per line, each argument that comes from the original call
    (the same node, or one with the same value: a renamed keyword) keeps its own comma, and so
    the comment at the end of its line; an argument the codemod adds gets none. The lines end
    as the original's did: the last argument takes the original closing layout.
    """
    args = list(args)
    multiline = any(_line_end(a.comma) is not None for a in call.args)
    if multiline and _in_place(call.args, args):
        # Each argument changed where it stood (a new name or value): the lines stay as they were.
        return call.with_changes(args=[a.with_changes(comma=o.comma) for a, o in zip(args, call.args, strict=True)])
    if multiline and args:
        return _one_per_line(call, args)
    fixed = [
        a
        if isinstance(a.comma, cst.Comma)
        else a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        for a in args[:-1]
    ]
    if args:
        fixed.append(args[-1])
    result = call.with_changes(args=fix_trailing_comma(fixed))
    if len(code_of(result)) > 88 and "\n" not in code_of(call):
        return one_per_line(result)
    return result


def _in_place(originals: Sequence[cst.Arg], args: Sequence[cst.Arg]) -> bool:
    """Is each of `args` the original argument at its position, or that one with a new keyword
    or a new value (not both)?"""
    return len(args) == len(originals) and all(
        a is o
        or (a.star == o.star and (a.value is o.value or (a.keyword is not None and o.keyword is not None and a.keyword.value == o.keyword.value)))
        for a, o in zip(args, originals, strict=True)
    )


def _line_end(comma: cst.Comma | cst.MaybeSentinel) -> cst.ParenthesizedWhitespace | None:
    """The line break after an argument's comma, when the argument ends its line."""
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        return comma.whitespace_after
    return None


def _one_per_line(call: cst.Call, args: list[cst.Arg]) -> cst.Call:
    """`call` with `args` one per line, each with the comments that were its own: the one that
    ends its line (in its comma) and those on the lines above it (in the line break before it)."""
    originals = list(call.args)
    breaks = [_line_end(a.comma) for a in originals]
    inner = [b for a, b in zip(originals, breaks, strict=True) if b is not None and a is not originals[-1]]
    middle = inner[0] if inner else next(b for b in breaks if b is not None)
    opening = call.whitespace_before_args
    if isinstance(opening, cst.ParenthesizedWhitespace):
        middle = middle.with_changes(last_line=opening.last_line)
    middle = middle.with_changes(empty_lines=[])
    last = originals[-1].comma if originals else cst.MaybeSentinel.DEFAULT

    def origin(arg: cst.Arg) -> int | None:
        return next(
            (
                j
                for j, o in enumerate(originals)
                if o is arg or (o.value is arg.value and o.star == arg.star)
            ),
            None,
        )

    def own_line(arg: cst.Arg) -> cst.TrailingWhitespace:
        j = origin(arg)
        end = breaks[j] if j is not None else None
        return end.first_line if end is not None else cst.TrailingWhitespace()

    def lines_above(arg: cst.Arg) -> Sequence[cst.EmptyLine]:
        j = origin(arg)
        if j is None:
            return []
        before = opening if j == 0 else breaks[j - 1]
        return before.empty_lines if isinstance(before, cst.ParenthesizedWhitespace) else []

    fixed = []
    for position, arg in enumerate(args):
        line = own_line(arg)
        if position < len(args) - 1:
            after = middle.with_changes(first_line=line, empty_lines=lines_above(args[position + 1]))
            fixed.append(arg.with_changes(comma=cst.Comma(whitespace_after=after)))
            continue
        end = _line_end(last)
        if end is not None:
            assert isinstance(last, cst.Comma)
            comma: cst.Comma | cst.MaybeSentinel = last.with_changes(
                whitespace_after=end.with_changes(first_line=line)
            )
        elif line.comment is not None:  # the comment needs a line end: close on the next line
            comma = cst.Comma(
                whitespace_after=cst.ParenthesizedWhitespace(
                    first_line=line, indent=True, last_line=cst.SimpleWhitespace("")
                )
            )
        else:
            comma = last
        fixed.append(arg.with_changes(comma=comma))
    if isinstance(opening, cst.ParenthesizedWhitespace) and args:
        opening = opening.with_changes(empty_lines=lines_above(args[0]))
    return call.with_changes(args=fixed, whitespace_before_args=opening)


def _newline(indent: str) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace(indent)
    )


def one_per_line(call: cst.Call) -> cst.Call:
    """Lay a call's arguments out one per line, with a trailing comma."""
    if not call.args:
        return call
    args = [a.with_changes(comma=cst.Comma(whitespace_after=_newline("    "))) for a in call.args]
    args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=_newline("")))
    return call.with_changes(whitespace_before_args=_newline("    "), args=args)


def literal(node: cst.BaseExpression | None) -> Any:
    """The Python value of a literal expression, or `...` when it is not one."""
    if node is None:
        return ...
    try:
        return ast.literal_eval(code_of(node))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ...


def compiled_artifacts_todo(options: dict[str, cst.BaseExpression], checkpoint: str) -> str | None:
    """The TODO of an optimum-neuron load that may read a Neuron export: without `export=True`
    (absent, or `export=False`) its path holds compiled graphs, which no native class reads."""
    export = options.get("export")
    flag = literal(export)
    if flag is True:
        return None
    what = f"this loads Neuron-compiled artifacts: point it at the original {checkpoint} checkpoint"
    return what if export is None or flag is False else f"where `export` is false, {what}"


# -- dict literals splatted into calls (`**compiler_args`) ---------------------------------------


@dataclass
class DictLiteral:
    name: str
    keys: dict[str, cst.BaseExpression]  # filled in when the assignment is seen by LibCST
    key_names: tuple[str, ...]
    uses: int  # loads of the name in the whole file


def dict_literals(source: str) -> dict[str, tuple[str, ...]]:
    """Names assigned exactly once, from a dict literal with string keys, and never mutated."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    assigned: dict[str, list[ast.AST]] = {}
    mutated: set[str] = set()
    for node in all_nodes(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    mutated.add(target.value.id)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and isinstance(node.target, ast.Name):
            assigned.setdefault(node.target.id, []).append(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        ):
            if node.func.attr in ("update", "pop", "setdefault", "clear", "popitem", "__setitem__"):
                mutated.add(node.func.value.id)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    mutated.add(target.value.id)
    found: dict[str, tuple[str, ...]] = {}
    for name, values in assigned.items():
        if name in mutated or len(values) != 1 or not isinstance(values[0], ast.Dict):
            continue
        keys = values[0].keys
        if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keys):
            found[name] = tuple(k.value for k in keys)  # type: ignore[union-attr]
    return found


def name_loads(source: str) -> dict[str, int]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    counts: dict[str, int] = {}
    for node in all_nodes(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            counts[node.id] = counts.get(node.id, 0) + 1
    return counts


def dict_entries(node: cst.BaseExpression) -> dict[str, cst.BaseExpression] | None:
    if not isinstance(node, cst.Dict):
        return None
    entries: dict[str, cst.BaseExpression] = {}
    for element in node.elements:
        if not isinstance(element, cst.DictElement):
            return None
        key = literal(element.key)
        if not isinstance(key, str):
            return None
        entries[key] = element.value
    return entries


# -- renames of imported names --------------------------------------------------------------------


class RenamingCodemod(Codemod):
    """A codemod whose table `RENAMES` maps old qualified names to `(module, name)` targets.

    Import lines are rewritten where they stand (`from optimum.neuron import NeuronTrainer as
    Trainer` -> `from transformers import Trainer`), names elsewhere in the code follow.
    """

    RENAMES: ClassVar[dict[str, tuple[str, str]]] = {}

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        self._skip: set[int] = set()
        self._import_depth = 0
        # Names used as types, not as factories: "test" (`isinstance`), "base", "annotation".
        self._as_type: dict[int, str] = {}
        # References used where they stand: called (`X(...)`) or asked for a method (`X.from_pretrained`).
        self._direct: set[int] = set()
        self._methods: dict[int, str] = {}  # references asked for a method -> the method

    # An `Auto*` class is a factory: no model has it among its bases, so `isinstance` with it is
    # always False, and a class cannot derive from it.
    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        self._direct.add(id(func))
        if (
            isinstance(func, cst.Name)
            and func.value in ("isinstance", "issubclass")
            and self.ctx.scope.lookup(func.value) is None
            and len(node.args) == 2
        ):
            types = node.args[1].value
            for element in types.elements if isinstance(types, cst.Tuple) else [types]:
                node_ = element.value if isinstance(element, cst.Element) else element
                self._as_type[id(node_)] = "test"

    def visit_Annotation(self, node: cst.Annotation) -> None:
        for part in _dotted_parts(node.annotation):
            self._as_type[id(part)] = "annotation"

    # Names that are not references: attributes, keywords, parameters, definitions, imports.
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip.add(id(node.attr))
        self._direct.add(id(node.value))
        self._methods[id(node.value)] = node.attr.value

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def visit_Param(self, node: cst.Param) -> None:
        self._skip.add(id(node.name))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._skip.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._skip.add(id(node.name))
        for base in node.bases:
            self._as_type[id(base.value)] = "base"

    def visit_Import(self, node: cst.Import) -> None:
        self._import_depth += 1

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._import_depth += 1

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        self._import_depth -= 1
        return updated_node

    def renamed(self, qualified: str | None) -> tuple[str, str] | None:
        return self.RENAMES.get(qualified) if qualified else None

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> Any:
        self._import_depth -= 1
        if (
            updated_node.relative
            or updated_node.module is None
            or isinstance(updated_node.names, cst.ImportStar)
        ):
            return updated_node
        module = dotted_name(updated_node.module)
        if not module:
            return updated_node
        kept, moved = self._split_renamed(module, list(updated_node.names))
        if not moved:
            return updated_node
        # A factory class read only as a type becomes `PreTrainedModel`/`GenerationMixin` there
        # (`_as_model_type`), which imports itself: nothing of this line is needed for it.
        st = self.ctx.shared(FileState)
        if st.types_only is None:
            st.types_only = _read_only_as_types(self.ctx.source)
        types_only = [
            (alias, target)
            for alias, target in moved
            if target[1].startswith("Auto") and (_alias_name(alias) or code_of(alias.name)) in st.types_only
        ]
        for alias, _ in types_only:
            st.handled.add(f"{module}.{code_of(alias.name)}")
        moved = [m for m in moved if m not in types_only]
        if not moved:
            if not kept:
                return self.ctx.remove(updated_node)
            return with_import_names(updated_node, kept)
        self._remember_renames(module, moved)
        if not kept and self._whole_line_moves_in_place(moved):
            return self._rewrite_in_place(updated_node, module, moved)
        self._import_where_needed(moved)
        self.changed(f"`from {module} import ...` -> {names_in(f'{m}.{n}' for _, (m, n) in moved)}")
        if not kept:
            return self.ctx.remove(updated_node)
        return with_import_names(updated_node, kept)

    def _split_renamed(
        self, module: str, aliases: list[cst.ImportAlias]
    ) -> tuple[list[cst.ImportAlias], list[tuple[cst.ImportAlias, tuple[str, str]]]]:
        """The names of `from module import ...` that stay, and those that move to a new class."""
        kept: list[cst.ImportAlias] = []
        moved: list[tuple[cst.ImportAlias, tuple[str, str]]] = []
        st = self.ctx.shared(FileState)
        if st.held_as_values is None:
            st.held_as_values = _held_as_values(self.ctx.source)
        values, direct, foreign = st.held_as_values
        for alias in aliases:
            target = self.renamed(f"{module}.{code_of(alias.name)}")
            local = _alias_name(alias) or code_of(alias.name)
            factory = target is not None and target[1].startswith("Auto")
            if local in foreign and not factory:
                direct = direct | {local}  # a trainer's or pipeline's methods are the native class's too
            # Arguments and trainers handed on as classes are followed where they go; a model class
            # held as a value, or asked for a method its factory lacks, stays for what is called on it.
            held = (local in values or (factory and local in foreign)) and not (
                target is not None and target[1].endswith(SETTINGS_CLASSES)
            )
            if target is None or held:
                kept.append(alias)
            if target is not None and (not held or local in direct):
                moved.append((alias, target))
        return kept, moved

    def _remember_renames(
        self, module: str, moved: list[tuple[cst.ImportAlias, tuple[str, str]]]
    ) -> None:
        """Record the aliases that now name the new class, so references to them stay as written."""
        st = self.ctx.shared(FileState)
        for alias, (_, new_name) in moved:
            local = _alias_name(alias)
            old_name = code_of(alias.name)
            if (local is not None and local != old_name) or old_name == new_name:
                st.renamed_locals.add(local or old_name)
            st.handled.add(f"{module}.{old_name}")

    def _whole_line_moves_in_place(
        self, moved: list[tuple[cst.ImportAlias, tuple[str, str]]]
    ) -> bool:
        """Can the import line become `from <one new module> import ...` where it stands?

        Not when the file already imports from that module at top level (the names join that
        line instead), nor when another line was already rewritten into it. A binding of the new
        name inside a block does not count: `except ImportError: from transformers import
        Trainer` runs only when the old import fails, which natively it no longer does.
        """
        st = self.ctx.shared(FileState)
        if st.top_from is None or st.top_bound is None:
            st.top_from = _top_level_from_modules(self.ctx.source)
            st.top_bound = _top_level_bound(self.ctx.source)
        new_modules = {target[0] for _, target in moved}
        new_module = next(iter(new_modules))
        return (
            len(new_modules) == 1
            and new_module not in st.top_from
            and new_module not in st.in_place
            and all(f"{t[0]}.{t[1]}" not in st.top_bound for _, t in moved)
        )

    def _rewrite_in_place(
        self,
        node: cst.ImportFrom,
        module: str,
        moved: list[tuple[cst.ImportAlias, tuple[str, str]]],
    ) -> cst.ImportFrom:
        new_module = moved[0][1][0]
        self.ctx.shared(FileState).in_place.add(new_module)
        self.ctx.provided.update(f"{new_module}.{t[1]}" for _, t in moved)
        names = []
        seen: set[str] = set()
        for alias, (_, new_name) in moved:
            local = _alias_name(alias)
            asname = None if local in (None, code_of(alias.name), new_name) else alias.asname
            key = f"{new_name} as {local}" if asname is not None else new_name
            if key in seen:
                continue
            seen.add(key)
            names.append(cst.ImportAlias(name=cst.Name(new_name), asname=asname, comma=alias.comma))
        self.changed(f"`from {module} import ...` -> `from {new_module} import ...`")
        return with_import_names(node.with_changes(module=cst.parse_expression(new_module)), names)

    def _import_where_needed(self, moved: list[tuple[cst.ImportAlias, tuple[str, str]]]) -> None:
        """Import the new classes on their own lines, keeping each user's alias."""
        for alias, (new_module, new_name) in moved:
            local = _alias_name(alias)
            if local is not None and local not in (code_of(alias.name), new_name):
                self.ctx.insert_after(
                    cst.parse_statement(f"from {new_module} import {new_name} as {local}\n")
                )
            else:
                spelled = self.ctx.need_from(new_module, new_name)
                if spelled != (local or code_of(alias.name)):
                    # The class is already imported under another name (`from transformers
                    # import LlamaForCausalLM as Original`): references take that name.
                    self.ctx.shared(FileState).renamed_locals.discard(local or code_of(alias.name))

    def rename_target(
        self, qualified: str | None, local_text: str, role: str | None = None
    ) -> str | None:
        """The new spelling of a reference to `qualified` written as `local_text`; `role` says
        where a type is meant rather than a factory (see `_as_type`)."""
        target = self.renamed(qualified)
        if target is None:
            return None
        new_module, new_name = target
        if role is not None and new_name.startswith("Auto"):
            return self._as_model_type(local_text, new_name, role)
        head = local_text.split(".")[0]
        if "." not in local_text and head in self.ctx.shared(FileState).renamed_locals:
            return local_text  # the import line now binds this alias to the new class
        if "." in local_text:
            return f"{self.ctx.need_import(new_module)}.{new_name}"
        return self.ctx.need_from(new_module, new_name)

    def _as_model_type(self, written: str, auto: str, role: str) -> str:
        """What stands for an optimum-neuron model class where a type is meant: the class every
        generating model has (`GenerationMixin`) for a causal LM, `PreTrainedModel` otherwise."""
        kind = "GenerationMixin" if auto == "AutoModelForCausalLM" and role == "test" else "PreTrainedModel"
        if role == "base":
            self.todo(
                f"`{written}` was a base class, `{auto}` is a factory: derive from the model's class or `PreTrainedModel`"
            )
            return f"{self.ctx.need_import('transformers')}.{auto}" if "." in written else self.ctx.need_from("transformers", auto)
        if role == "test" and kind == "PreTrainedModel":
            self.todo(
                f"`{written}` in a type test became `PreTrainedModel`: narrow the test if it must tell models apart"
            )
        self.changed(f"`{written}` as a type -> `{kind}` (`{auto}` is a factory, no model's class)")
        return self.ctx.need_from("transformers", kind)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if self._import_depth or id(original_node) in self._skip:
            return updated_node
        qualified = self.qualify(original_node)
        if self._kept_as_value(original_node, qualified):
            return updated_node
        new = self.rename_target(qualified, original_node.value, self._as_type.get(id(original_node)))
        if new is None or new == original_node.value:
            return updated_node
        return cst.parse_expression(new)

    def _kept_as_value(self, node: cst.Name | cst.Attribute, qualified: str | None) -> bool:
        """A class held in a variable, a dict or an argument (`auto_class = NeuronModelForCausalLM`):
        what is called on it later (`.export(...)`, `from_pretrained(..., export=True, batch_size=1)`)
        cannot be followed, and its native counterpart has none of that. Kept, with a TODO."""
        target = self.renamed(qualified)
        method = self._methods.get(id(node))
        if target is not None and target[1].startswith("Auto") and method is not None and method not in AUTO_METHODS:
            written = dotted_name(node) or ""
            self.todo(
                f"`{written}.{method}` has no counterpart on `{target[1]}`: port what it does by hand",
                explains=(written, f"{written}.{method}"),
            )
            return True
        if target is None or id(node) in self._direct or id(node) in self._as_type or target[1].endswith(SETTINGS_CLASSES):
            return False
        written = dotted_name(node) or ""
        self.todo(
            f"`{written}` is held as a value, so its later calls are not migrated: for plain loads use `{target[1]}`",
            explains=(written,),
        )
        return True

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if self._import_depth:
            return updated_node
        qualified = self.qualify(original_node)
        text = dotted_name(original_node)
        if qualified is None or text is None or self.renamed(qualified) is None:
            return updated_node
        if self._kept_as_value(original_node, qualified):
            return updated_node
        new = self.rename_target(qualified, text, self._as_type.get(id(original_node)))
        return cst.parse_expression(new) if new else updated_node


# What transformers' `Auto*` factories offer, and what the rules port (`export`, `get_neuron_config`):
# another method of an optimum-neuron class (`get_export_config`) stays with the class it belongs to.
AUTO_METHODS = frozenset({"from_pretrained", "from_config", "register", "export", "get_neuron_config"})


def _dotted_parts(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The names and dotted names in a type expression (`list[NeuronModel] | None`)."""
    if isinstance(node, cst.Name | cst.Attribute):
        return [node]
    found: list[cst.BaseExpression] = []
    for child in children(node):
        if isinstance(child, cst.BaseExpression):
            found += _dotted_parts(child)
        else:
            for grandchild in children(child):
                if isinstance(grandchild, cst.BaseExpression):
                    found += _dotted_parts(grandchild)
    return found


def _alias_name(alias: cst.ImportAlias) -> str | None:
    """The `as` name of an imported name, if it has one."""
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return None


def with_import_names(node: cst.ImportFrom, names: list[cst.ImportAlias]) -> cst.ImportFrom:
    """`node` importing `names`, without a trailing comma or parentheses around a single name."""
    names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    new = node.with_changes(names=names)
    if new.lpar is not None and len(names) == 1:
        new = new.with_changes(lpar=None, rpar=None)
    return new


# -- leftovers ----------------------------------------------------------------------------------


class _OptimumFinder(StatementHeaderVisitor):
    """Old-stack references left in one statement (its header, for compound statements)."""

    def __init__(self, codemod: Codemod, prefixes: tuple[str, ...], skip_locals: set[str]) -> None:
        self.codemod = codemod
        self.prefixes = prefixes
        self.skip_locals = skip_locals
        self.found: list[tuple[str, str]] = []  # (written, qualified)

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.scan(node.value)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return not isinstance(node.target, cst.Name)

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            self.scan(node.default)
        if node.annotation is not None:
            self.scan(node.annotation)
        return False

    def _match(self, node: cst.CSTNode) -> bool:
        text = dotted_name(node)
        if text is None:
            return False
        if text.split(".")[0] in self.skip_locals:
            return True
        qualified = self.codemod.qualify(node)
        if qualified and any(
            qualified == p or qualified.startswith(p + ".") for p in self.prefixes
        ):
            self.found.append((text, qualified))
            return True
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return not self._match(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._match(node)


def mark_leftovers(codemod: Codemod, node: cst.CSTNode, prefixes: tuple[str, ...]) -> None:
    """TODO for each reference to `prefixes` that no codemod rewrote in this statement."""
    from neuron_migrate.rewrite.codemods import manual_message  # the registry imports this module

    if not isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return
    finder = _OptimumFinder(codemod, prefixes, codemod.ctx.shared(FileState).renamed_locals)
    if isinstance(node, cst.SimpleStatementLine):
        for small in node.body:
            if id(small) not in codemod.ctx.removed:
                finder.scan(small)
    else:
        for part in children(node):
            if not isinstance(part, cst.BaseSuite):
                finder.scan(part)
    explained = codemod.ctx.frames[-1].explained if codemod.ctx.frames else set()
    for written, qualified in dict.fromkeys(finder.found):
        if written in explained:
            continue  # a TODO of its own says what to do
        code, message = manual_message(qualified)
        codemod.ctx.todo(
            code,
            message.replace("{name}", written)
            if "{name}" in message
            else f"`{written}`: {message}",
        )


# -- old-stack modules this tool cannot see -------------------------------------------------------

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def named_module(text: str, roots: tuple[str, ...], importing: bool) -> str | None:
    """The old-stack module a string spells (`"optimum.neuron.trainers"`, `"torch_neuronx."`).

    A bare top-level name (`"torch_neuronx"`) counts only where a module is imported by name:
    elsewhere it is a package name, in a version check or an install command.
    """
    path = text.removesuffix(".")
    if not _DOTTED.fullmatch(path):
        return None
    for root in roots:
        if path.startswith(root + ".") or (path == root and (importing or "." in root)):
            return path
    return None


def _leading_string(node: cst.BaseExpression) -> cst.BaseExpression:
    """The string a string expression starts with: `"a." + x` -> `"a."`."""
    while isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        node = node.left
    return node


def _leading_text(node: cst.BaseExpression) -> str | None:
    node = _leading_string(node)
    if isinstance(node, cst.SimpleString):
        return string_value(node)
    if isinstance(node, cst.FormattedString) and node.parts:
        first = node.parts[0]
        return first.value if isinstance(first, cst.FormattedStringText) else None
    return None


def mark_named_module(
    codemod: Codemod, node: cst.BaseExpression, roots: tuple[str, ...], importing: bool = False
) -> None:
    """TODO where a string names an old-stack module: an import by name, an `eval`, a patch
    target, a `sys.modules` key. What it reaches is out of sight, so nothing there is migrated."""
    from neuron_migrate.rewrite.codemods import manual_message  # the registry imports this module

    text = _leading_text(node)
    if text is None:
        return
    module = named_module(text, roots, importing)
    state = codemod.ctx.shared(FileState)
    if module is None or (not importing and id(node) in state.imported_by_name):
        return  # the import by name reports it, with its own message
    root = next(r for r in roots if module == r or module.startswith(r + "."))
    reported = state.named
    if not importing:
        if root in reported:
            return  # one TODO stands for them all: tests patch dozens of targets
        reported.add(root)
    hint = manual_message(module)[1]
    hint = hint.replace("{name}", module) if "{name}" in hint else f"`{module}`: {hint}"
    every = "" if importing else f" (this TODO stands for every `{root}` string here)"
    codemod.todo(f"a string names `{module}`: nothing it reaches is migrated{every}; {hint}")


def _run_time_import_argument(codemod: Codemod, call: cst.Call) -> cst.BaseExpression | None:
    """The module-name argument of `importlib.import_module(...)` / `__import__(...)`."""
    name = codemod.qualify(call.func)
    if name is None and isinstance(call.func, cst.Name) and call.func.value == "__import__":
        name = "__import__"
    return call.args[0].value if name in RUN_TIME_IMPORTS and call.args else None


def note_run_time_import(codemod: Codemod, call: cst.Call) -> None:
    """Before its strings are left: the module name of an import by name is reported once, there."""
    argument = _run_time_import_argument(codemod, call)
    if argument is not None:
        codemod.ctx.shared(FileState).imported_by_name.add(id(_leading_string(argument)))


def mark_run_time_import(codemod: Codemod, call: cst.Call, roots: tuple[str, ...]) -> None:
    """`importlib.import_module("torch_neuronx")`, `__import__(...)`: TODO for an old-stack module."""
    argument = _run_time_import_argument(codemod, call)
    if argument is not None:
        mark_named_module(codemod, argument, roots, importing=True)


def mark_star_import(codemod: Codemod, node: cst.ImportFrom, roots: tuple[str, ...]) -> None:
    """`from torch_neuronx import *` hides which names the file takes from the old stack."""
    module = dotted_name(node.module) if node.module is not None and not node.relative else None
    if not isinstance(node.names, cst.ImportStar) or module is None:
        return
    if any(module == root or module.startswith(root + ".") for root in roots):
        codemod.todo(star_import_todo(module))


def names_in(items: Iterable[str]) -> str:
    return ", ".join(f"`{i}`" for i in items)
