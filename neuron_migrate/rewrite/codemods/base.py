"""What every codemod shares: the target spellings, the per-file context, and the base class.

A codemod is a LibCST transformer that only writes `leave_*` methods; the dispatcher runs all
selected codemods in a single traversal. Codemods never edit statements around them directly:
they ask the context to remove a statement, insert statements before or after the current one,
attach a TODO, need an import or a helper. The dispatcher applies those requests where the tree
allows it, so comments survive and blocks never end up empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import libcst as cst

from neuron_migrate.core.names import ImportTable
from neuron_migrate.core.oldstack import OPTIMUM_NEURON
from neuron_migrate.rewrite.results import Change, Note

_EMPTY = cst.Module(body=[])
N = TypeVar("N", bound=cst.CSTNode)
S = TypeVar("S")


def dotted_name(node: cst.CSTNode) -> str | None:
    """`a.b.c` for a LibCST Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def expr(source: str) -> cst.BaseExpression:
    return cst.parse_expression(source)


def stmt(source: str) -> cst.BaseStatement:
    return cst.parse_statement(source)


def arg_value(call: cst.Call, position: int | None, keyword: str | None) -> cst.Arg | None:
    """The argument given by keyword, or at `position` among the positional ones."""
    if keyword is not None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                return arg
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position < len(positional):
            return positional[position]
    return None


def has_star_args(call: cst.Call) -> bool:
    return any(a.star for a in call.args)


def without_args(call: cst.Call, keywords: Sequence[str]) -> cst.Call:
    kept = [a for a in call.args if a.keyword is None or a.keyword.value not in keywords]
    return call.with_changes(args=fix_trailing_comma(kept))


def fix_trailing_comma(args: Sequence[cst.Arg]) -> list[cst.Arg]:
    """Drop the comma after the new last argument, unless the call was laid out one per line."""
    args = list(args)
    if args and isinstance(args[-1].comma, cst.Comma):
        comma = args[-1].comma
        if not (isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)):
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return args


def string_value(node: cst.CSTNode) -> str | None:
    """The value of a plain (non-f, non-bytes) string literal."""
    if isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower():
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def with_string_value(node: cst.SimpleString, value: str) -> cst.SimpleString:
    quote = node.quote
    return node.with_changes(value=f"{node.prefix}{quote}{value}{quote}")


@dataclass(frozen=True)
class Target:
    """How the migrated code names the device, the compile backend and the process group."""

    name: str  # "portable" | "neuron"

    @property
    def neuron(self) -> bool:
        return self.name == "neuron"

    def device(self, torch: str = "torch") -> str:
        if self.neuron:
            return f'{torch}.device("neuron")'
        return f'{torch}.accelerator.current_accelerator(check_available=True) or {torch}.device("cpu")'

    def device_type(self, torch: str = "torch") -> str:
        if self.neuron:
            return '"neuron"'
        return f"({self.device(torch)}).type"


PORTABLE = Target("portable")
NEURON = Target("neuron")
TARGETS = {"portable": PORTABLE, "neuron": NEURON}


@dataclass
class FileFacts:
    """File-wide facts some rewrites depend on, computed once before rewriting."""

    used: set[str] = field(default_factory=set)  # qualified names the file refers to

    def uses(self, *prefixes: str) -> bool:
        return any(
            name == prefix or name.startswith(prefix + ".") for prefix in prefixes for name in self.used
        )

    @property
    def launches_processes(self) -> bool:
        return self.uses(
            "torch_xla.distributed.xla_multiprocessing.spawn",
            "torch_xla.launch",
        )

    @property
    def inits_process_group(self) -> bool:
        return self.uses("torch.distributed.init_process_group")

    @property
    def distributed(self) -> bool:
        """The file sets up the process group itself (or will, once migrated)."""
        return self.launches_processes or self.inits_process_group

    @property
    def syncs_gradients(self) -> bool:
        """Gradients are already averaged by a wrapper, so no explicit all-reduce is needed."""
        return self.uses(
            "torch.nn.parallel.DistributedDataParallel",
            "torch.nn.parallel.distributed.DistributedDataParallel",
            "torch.distributed.fsdp",
            "torch.distributed._composable.fsdp",
            "torch_xla.distributed.fsdp",
        )


@dataclass
class Frame:
    """Requests made while inside one statement."""

    todos: list[tuple[str, str]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)  # plain comments, e.g. a launch command
    before: list[cst.BaseStatement] = field(default_factory=list)
    after: list[cst.BaseStatement] = field(default_factory=list)


@dataclass
class MigrationContext:
    target: Target
    imports: ImportTable
    facts: FileFacts
    path: str = ""
    source: str = ""
    old_stack_file: bool = True  # the file imports an old-stack package
    changes: list[Change] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    # Statements to drop, by id; the values keep the nodes alive so an id is never reused.
    removed: dict[int, cst.CSTNode] = field(default_factory=dict)
    new_imports: dict[str, str | None] = field(default_factory=dict)  # module -> asname
    from_imports: dict[str, dict[str, None]] = field(default_factory=dict)  # module -> names, in order
    provided: set[str] = field(default_factory=set)  # qualified names an import rewritten in place binds
    # Per-file state of a codemod family, one instance per class (see `shared`).
    family_state: dict[type, Any] = field(default_factory=dict)
    helpers: dict[str, str] = field(default_factory=dict)  # name -> source of a module-level def
    module_prologue: list[str] = field(default_factory=list)  # statements placed after imports
    grouped: dict[int, cst.CSTNode] = field(default_factory=dict)  # parentheses we added, maybe needlessly
    placeholders: dict[int, cst.CSTNode] = field(default_factory=dict)  # `pass` we put in emptied blocks
    # Per scope (module, then each enclosing function): the variable that already holds the
    # native device, so later uses in that scope say `device` instead of repeating the lookup.
    device_names: list[str | None] = field(default_factory=lambda: [None])

    # -- reporting ------------------------------------------------------------------------------
    def changed(self, code: str, message: str) -> None:
        self.changes.append(Change(code, message))

    def note(self, code: str, message: str) -> None:
        if not any(n.code == code and n.message == message for n in self.notes):
            self.notes.append(Note(code, message))

    def todo(self, code: str, message: str) -> None:
        """Attach `# TODO(neuron-migrate CODE): message` to the statement being rewritten."""
        frame = self.frames[-1] if self.frames else None
        if frame is None:
            raise RuntimeError("todo() outside a statement")
        if (code, message) not in frame.todos:
            frame.todos.append((code, message))

    def comment(self, text: str) -> None:
        """Put a plain comment line above the statement being rewritten (never twice)."""
        frame = self.frames[-1]
        if text not in frame.comments:
            frame.comments.append(text)

    # -- statement edits ------------------------------------------------------------------------
    def remove(self, node: N) -> N:
        """Drop this small statement (or statement) from its block; its comments are kept."""
        self.removed[id(node)] = node
        return node

    def insert_before(self, *statements: cst.BaseStatement) -> None:
        self.frames[-1].before.extend(statements)

    def insert_after(self, *statements: cst.BaseStatement) -> None:
        self.frames[-1].after.extend(statements)

    def group(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """Parenthesize a low-precedence expression; the dispatcher drops the parentheses where
        the context makes them needless (an assignment, an argument, a return)."""
        if not isinstance(node, cst.BooleanOperation | cst.IfExp | cst.Comparison):
            return node
        wrapped = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        self.grouped[id(wrapped)] = wrapped
        return wrapped

    # -- imports and helpers --------------------------------------------------------------------
    def need_import(self, module: str, asname: str | None = None) -> str:
        """The name to write for `module` here, adding `import module [as asname]` if needed."""
        existing = self.imports.local_for(module)
        if existing is not None:
            return existing
        if "." not in module and asname is None:
            self.new_imports.setdefault(module, None)
            return module
        local = asname or module
        if asname is not None and self.imports.bindings.get(asname, module) != module:
            local, asname = module, None  # the short name means something else in this file
        self.new_imports.setdefault(module, asname)
        if "." in module and asname is None:
            self.new_imports.setdefault(module.split(".")[0], None)
        return local

    def need_from(self, module: str, name: str) -> str:
        """The local name for `module.name`, adding `from module import name` if the file lacks it."""
        qualified = f"{module}.{name}"
        if qualified in self.provided:
            return name
        existing = self.imports.local_for(qualified)
        if existing is not None and "." not in existing:
            return existing
        bound = self.imports.bindings.get(name)
        if bound not in (None, qualified) and not bound.startswith(OPTIMUM_NEURON):
            # The short name means something else here: spell it through the module.
            return f"{self.need_import(module)}.{name}"
        self.from_imports.setdefault(module, {})[name] = None
        return name

    def shared(self, kind: type[S]) -> S:
        """The state of type `kind` that the codemods of one family share in this file."""
        found = self.family_state.get(kind)
        if found is None:
            found = self.family_state[kind] = kind()
        return found

    def torch(self) -> str:
        return self.need_import("torch")

    def dist(self) -> str:
        return self.need_import("torch.distributed", "dist")

    def os(self) -> str:
        return self.need_import("os")

    def need_helper(self, name: str, source: str) -> str:
        self.helpers.setdefault(name, source)
        return name

    # -- spellings shared by several codemods ---------------------------------------------------
    def device_expr(self) -> str:
        return self.device_names[-1] or self.target.device(self.torch())

    def device_type_expr(self) -> str:
        if self.device_names[-1]:
            return f"{self.device_names[-1]}.type"
        return self.target.device_type(self.torch())

    def local_rank_expr(self) -> str:
        return f'int({self.os()}.environ.get("LOCAL_RANK", 0))'

    def rank_expr(self) -> str:
        dist = self.dist()
        if self.facts.distributed:
            return f"{dist}.get_rank()"
        return f"({dist}.get_rank() if {dist}.is_initialized() else 0)"

    def world_size_expr(self) -> str:
        dist = self.dist()
        if self.facts.distributed:
            return f"{dist}.get_world_size()"
        return f"({dist}.get_world_size() if {dist}.is_initialized() else 1)"


class Codemod(cst.CSTTransformer):
    """Base of every codemod. Subclasses set the class attributes and write `leave_*` methods.

    The class docstring is the user documentation, in sections: what it does, why, example,
    use instead, fix safety (rendered by `neuron-migrate rules`).
    """

    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # The codemod runs on a file only if it refers to one of these qualified names (or below).
    triggers: ClassVar[tuple[str, ...]] = ()
    # Qualified name -> TODO text, for APIs of this family that have no automatic rewrite.
    manual: ClassVar[dict[str, str]] = {}
    # The codemod runs only if the raw text contains one of these (cheap prefilter).
    markers: ClassVar[tuple[str, ...]] = ()
    # Most codemods only touch files that import the old stack: an `"xla"` string or an
    # `XLA_USE_BF16` in a library that merely supports XLA is not a script to migrate.
    needs_old_stack_import: ClassVar[bool] = True

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__()
        self.ctx = ctx

    @classmethod
    def applies(cls, facts: FileFacts, text: str) -> bool:
        if cls.triggers and facts.uses(*cls.triggers):
            return True
        return any(marker in text for marker in cls.markers)

    def qualify(self, node: cst.CSTNode) -> str | None:
        dotted = dotted_name(node)
        return self.ctx.imports.resolve_dotted(dotted) if dotted else None

    def called(self, node: cst.CSTNode, *names: str) -> bool:
        """Is `node` a call of one of the qualified `names`?"""
        return isinstance(node, cst.Call) and self.qualify(node.func) in names

    def changed(self, message: str) -> None:
        self.ctx.changed(self.code, message)

    def todo(self, message: str) -> None:
        self.ctx.todo(self.code, message)
