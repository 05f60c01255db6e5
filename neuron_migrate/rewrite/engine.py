"""Rewrites one source text: prefilter, parse, run the codemods, tidy imports, verify.

The cheap steps come first: a substring scan skips files that cannot need anything, and `ast`
(not LibCST) answers which codemods apply. Whatever the codemods produce is parsed again before
it is accepted: a result that is not valid Python is an internal error, and the input is left
as it was.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

from neuron_migrate.core import selection
from neuron_migrate.core.cst_children import PUNCTUATION, transform
from neuron_migrate.core.names import (
    ImportTable,
    modules_out_of_sight,
    qualified_names_used,
    surely_called_by,
    unconditional_calls,
)
from neuron_migrate.core.oldstack import (
    INF1_IMPORT,
    MOVES_WITH_ITS_KERNEL,
    OPTIMUM_NEURON,
    lightning_xla,
    old_stack_module,
)
from neuron_migrate.core.oldstack import PACKAGES as OLD_STACK_PACKAGES
from neuron_migrate.core.scopes import ScopeTable
from neuron_migrate.core.source import syntax_error_message
from neuron_migrate.rewrite.codemods import CODEMODS, manual_message
from neuron_migrate.rewrite.codemods.base import (
    PORTABLE,
    Codemod,
    FileFacts,
    MigrationContext,
    Target,
    Transformer,
)
from neuron_migrate.rewrite.codemods.nxd_left_whole import left_whole
from neuron_migrate.rewrite.codemods.nxd_program import MeshProgram
from neuron_migrate.rewrite.codemods.nxd_tensor_parallel import NxdTensorParallel, plan
from neuron_migrate.rewrite.dispatch import Dispatcher
from neuron_migrate.rewrite.imports import (
    add_from_imports,
    add_from_lines,
    add_module_level,
    drop_later_duplicates,
    remove_dead_imports,
    used_names,
)
from neuron_migrate.rewrite.printing import ModulePrinter
from neuron_migrate.rewrite.results import FileResult, Helper, ManualItem
from neuron_migrate.rewrite.shared_helpers import shareable
from neuron_migrate.rewrite.spelling import renamed
from neuron_migrate.rewrite.suites import expand_old_stack_suites, has_one_line_bodies
from neuron_migrate.rewrite.verify import CODE as VERIFY_CODE
from neuron_migrate.rewrite.verify import verify, with_todos
from neuron_migrate.rewrite.verify.leftovers import (
    bound_elsewhere,
    old_stack_left,
    tpu_trainer_arguments,
)

# A file that contains none of these cannot need a migration.
PREFILTER = re.compile(
    r"torch_xla|XLA_|PJRT_DEVICE|['\"]xla[:'\"]|openxla|xla://"
    r"|optimum\.neuron|from\s+optimum\s+import\b[^\n]*\bneuron\b|from\s+optimum\s+import\s*\([^)]*\bneuron\b"
    r"|optimum-cli|optimum\.tpu|torch_neuron|neuronx_distributed|neuronperf"
    r"|transformers_neuronx|neuron_parallel_compile|torch\.neuron\.|import[ \t]+torch\.neuron\b"
    r"|from[ \t]+torch(?:\.neuron\b|[ \t]+import[ \t]+neuron\b)"
    r"|NEURON_EXTRACT_GRAPHS_ONLY|adapter_default|optimum/neuron/|optimum\.commands\.optimum_cli"
    r"|\b(?:SingleDevice)?XLA(?:Accelerator|Strategy|FSDPStrategy|Precision|Bf16Precision|CheckpointIO|Environment)\b"
    r"|\bTPUAccelerator\b|\b(?:xm|xr|xmp|met|xu|xser|xp|xs)\.\w|tpu_cores|accelerator\s*=\s*[\"']tpu[\"']"
)

_TODO = re.compile(r"#\s*TODO\(neuron-migrate (NM\d{3})\):\s*(.*)$")


@dataclass(frozen=True)
class Options:
    target: Target = PORTABLE
    select: tuple[str, ...] = ()  # codes, prefixes or ALL; empty means all
    ignore: tuple[str, ...] = ()
    helpers_module: str | None = None  # import def/class helpers from this module (see shared_helpers)
    mesh_program: MeshProgram | None = None  # the file's part in an NxD program of several files
    # A script of the same run that imports this module and gives its processes a process group.
    group_made_by: str | None = None
    # The interpreter whose libraries the output is checked against (NM091, `verify`); None: the
    # output is not checked (the command line checks it, a caller asks for it).
    verify_in: str | None = None
    # The file's folder holds old-stack code the run migrates: the upgrade family (transformers 5,
    # TRL 1.x) runs on this file as well, as its code moves to the new versions with theirs.
    beside_old_stack: bool = False
    # The files this run migrates (resolved): a module beside the file among them is migrated too.
    migrated_together: frozenset[str] = frozenset()
    # Old-stack module names the code reads but never binds (`xm` from a star import) get a TODO
    # at each use; a caller that says so itself (a notebook cell run alone) turns this off.
    marks_unbound_aliases: bool = True

    def enabled(self, code: str) -> bool:
        return selection.enabled(code, self.select, self.ignore)

    def asked_for(self, code: str) -> bool:
        """Was `code` selected by name or by a prefix narrower than `NM` (`--select NM2`)?"""
        return self.enabled(code) and any(len(s) > 2 and code.startswith(s) for s in self.select)


def manual_items(text: str) -> list[ManualItem]:
    """The TODO markers in `text`, with their positions (markers from earlier runs included)."""
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "neuron-migrate NM" not in line:
            continue
        match = _TODO.search(line)
        if match:
            items.append(ManualItem(match.group(1), match.group(2).strip(), number, match.start() + 1))
    return items


def split_trailing_blank_lines(text: str) -> tuple[str, str]:
    """`text` as (everything up to the end of its last non-blank line, the blank lines after)."""
    stripped = text.rstrip(" \t\r\n\f\v")
    newline = text.find("\n", len(stripped))
    if not stripped or newline == -1:
        return text, ""
    return text[: newline + 1], text[newline + 1 :]


def rewrite_source(
    text: str, path: str = "<stdin>", options: Options | None = None, environment: Mapping[str, str] | None = None
) -> FileResult:
    """Migrate one Python source text. Never raises for bad input: errors go in the result.

    `environment`: XLA variables the process running this code starts with, where the code's
    launcher is known (a notebook's `%env`, the `!` command that runs a `%%writefile` script)."""
    if "\r" in text and "\n" not in text:
        # Old Mac line endings: Python reads them as newlines, LibCST does not. Migrated with
        # `\n` (no `\n` was there to confuse with them) and given back their `\r`.
        result = _rewrite_source(text.replace("\r", "\n"), path, options, environment)
        result.original = text
        result.migrated = result.migrated.replace("\n", "\r")
        return result
    return _rewrite_source(text, path, options, environment)


def _rewrite_source(
    text: str, path: str, options: Options | None, environment: Mapping[str, str] | None
) -> FileResult:
    options = options or Options()
    environment = dict(environment or {})
    result = FileResult(path=path, original=text, migrated=text)
    if not PREFILTER.search(text) and "neuron-migrate NM" not in text and not environment and not _alone(text, options):
        result.skipped = True
        return result
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        result.error = syntax_error_message(path, exc, text)
        return result
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
        result.error = f"{path}:1:1: cannot parse: {exc}"
        return result

    table = ImportTable.from_ast(tree)
    facts = FileFacts(
        used=qualified_names_used(tree, table),
        always_called=unconditional_calls(tree, table),
        surely_called_by=surely_called_by(tree, table),
        environment=environment,
    )
    old_names = table.names_under(OLD_STACK_PACKAGES) - table.names_under(MOVES_WITH_ITS_KERNEL)
    old_names |= {local for local, target in table.bindings.items() if lightning_xla(target)}
    selected = _applicable(tree, text, table, facts, old_names, options)
    if NxdTensorParallel in selected:
        nxd = plan(text, table.resolve_dotted, facts.always_called, path, options.mesh_program)
        if nxd.blocked is not None:
            result.migrated = left_whole(text, tree, nxd)
            result.kept_as_it_was = nxd.blocked
            result.manual = manual_items(result.migrated)
            return result
    hidden = _old_stack_star_imports(tree)  # bind old-stack names the table cannot list
    if not selected and not old_names and not hidden:
        if options.enabled(VERIFY_CODE):
            # `xm.mark_step()` with `xm` from a star import or another cell, a Lightning trainer
            # asked for TPU cores: the old stack without its imports, which no rule sees.
            unbound = old_stack_left(tree, text) if options.marks_unbound_aliases and bound_elsewhere(tree) else []
            result.migrated = with_todos(text, unbound + tpu_trainer_arguments(tree, text))
        result.manual = manual_items(result.migrated)
        return result

    # Blank lines at the very end are kept aside: LibCST does not always print them back as
    # they were (`"A\n\n \n"` comes back as `"A\n \n"`).
    body, tail = split_trailing_blank_lines(text)
    try:
        module = cst.parse_module(body)
    except cst.ParserSyntaxError as exc:
        result.error = f"{path}:{exc.raw_line}:{exc.raw_column + 1}: cannot parse: {exc.message}"
        return result
    except RecursionError:
        result.error = f"{path}:1:1: cannot parse: nesting too deep"
        return result

    printer = ModulePrinter()
    if printer.code(module) != body:
        result.error = f"{path}:1:1: cannot be migrated without changing untouched lines (LibCST round trip); file left unchanged"
        return result
    expanded = expand_old_stack_suites(module, old_names) if has_one_line_bodies(tree, text) else module
    if expanded is not module and expanded.code != body:
        # Migrate the file as if those bodies had been written on their own lines.
        result = rewrite_source(expanded.code + tail, path, options, environment)
        result.original = text
        if result.error:
            result.migrated = text
        return result

    try:
        scopes = ScopeTable.from_ast(tree, text)
    except RecursionError:
        result.error = f"{path}:1:1: cannot parse: nesting too deep"
        return result
    ctx = MigrationContext(
        target=options.target,
        imports=table,
        facts=facts,
        path=path,
        source=text,
        old_stack_file=bool(old_names or hidden),
        scopes=scopes,
        mesh_program=options.mesh_program,
        group_made_by=options.group_made_by,
    )
    codemods = [c(ctx) for c in selected]

    def leftover(qualified: str) -> tuple[str, str] | None:
        code, message = manual_message(qualified)
        return (code, message) if options.enabled(code) else None  # an ignored rule stays quiet

    dispatcher = Dispatcher(ctx, codemods, old_names, leftover, lambda m: add_from_imports(m, ctx))
    try:
        code, shared = _module_level(dispatcher.rewrite(module), ctx, scopes, tree, old_names, options, printer)
        if code[:1] in ("\n", "\r") and body[:1] not in ("\n", "\r"):
            code = code.lstrip("\r\n")  # what opened the file went: no blank line may open it now
        code += tail
        _check_compiles(code, text)
    except SyntaxError as exc:
        result.error = f"{path}:1:1: internal error: the migrated code did not parse ({exc.msg}); file left unchanged"
        return result
    except RecursionError:
        result.error = f"{path}:1:1: internal error: nesting too deep to migrate; file left unchanged"
        return result
    except Exception as exc:  # a codemod bug must cost one file, never the run
        result.error = f"{path}:1:1: internal error: {type(exc).__name__}: {exc}; file left unchanged"
        return result

    result.migrated = code
    result.shared_helpers = shared
    result.changes = ctx.changes
    result.notes = ctx.notes
    result.manual = manual_items(code)
    if options.verify_in is not None and options.enabled(VERIFY_CODE):
        verify(result, options.verify_in, options.migrated_together)
    return result


def _compile(code: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes and the like: the user's own
        compile(code, "<migrated>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def _check_compiles(code: str, original: str) -> None:
    """A SyntaxError where the migrated code does not compile (a keyword given twice parses, but
    does not compile) while the original did."""
    try:
        _compile(code)
    except SyntaxError:
        try:
            _compile(original)
        except (SyntaxError, ValueError):
            return  # not compilable before either (a notebook's IPython-only code): not ours to judge
        raise


def _old_stack_star_imports(tree: ast.Module) -> bool:
    """Does the file hold a `from <old-stack module> import *`?"""
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module is not None
        and not node.level
        and any(a.name == "*" for a in node.names)
        and old_stack_module(node.module)
        for node in ast.walk(tree)
    )


def _applicable(
    tree: ast.Module, text: str, table: ImportTable, facts: FileFacts, old_names: set[str], options: Options
) -> list[type[Codemod]]:
    """The codemods that can apply to this file: selected, and gated on an old-stack import."""
    # A star import, or a module named by a string (`import_module("...")`, a patch target), too.
    gate = old_names or table.names_under((OPTIMUM_NEURON,)) or INF1_IMPORT.search(text) or any(
        m.split(".")[0] in OLD_STACK_PACKAGES or f"{m}.".startswith(f"{OPTIMUM_NEURON}.")
        for m in modules_out_of_sight(tree, table)
    )
    return [
        c
        for c in CODEMODS
        if options.enabled(c.code)
        and (gate or not c.needs_old_stack_import or _runs_alone(c, options))
        and c.applies(facts, text)
    ]


def _runs_alone(codemod: type[Codemod], options: Options) -> bool:
    """May `codemod` run on a file without the old stack (asked for by name, or beside such files)?"""
    return codemod.runs_alone and options.enabled(codemod.code) and (options.beside_old_stack or options.asked_for(codemod.code))


def _alone(text: str, options: Options) -> bool:
    """Is a codemod that runs without the old stack wanted here, and may it apply to `text`?"""
    return any(_runs_alone(c, options) and any(m in text for m in c.markers) for c in CODEMODS)


def _module_level(
    migrated: cst.Module,
    ctx: MigrationContext,
    scopes: ScopeTable,
    tree: ast.Module,
    old_names: set[str],
    options: Options,
    printer: ModulePrinter,
) -> tuple[str, dict[str, Helper]]:
    """Imports, helpers and set-up statements after the traversal: only what the final code uses
    (a rewrite may ask for an import, then lose its statement). Returns the final code, printed
    once more only if this step changed the module and parsed (a `SyntaxError` when it does not),
    and the helpers it imports from `options.helpers_module` instead of defining them."""
    printed = printer.code(migrated)
    after = ast.parse(printed)
    traversed = migrated
    if options.enabled("NM012"):
        migrated = remove_dead_imports(migrated, ctx, scopes, after, old_names, printed)
    used = used_names(after)
    wanted = _helpers_used(ctx.helpers, used)
    # A helper the file defines already, as this tool wrote it (a notebook cell applied before):
    # its uses take that one, and no second copy is added.
    own = _own_copies(wanted, tree)
    wanted = {name: source for name, source in wanted.items() if name not in own}
    if not ctx.notebook and not ctx.target.neuron:
        migrated, constant = _device_once(migrated, ctx, printed)
        if constant is not None:
            wanted = {constant[0]: constant[1], **wanted}
    shared = shareable(wanted, ctx.spelled) if options.helpers_module and not ctx.notebook else {}
    if shared:
        assert options.helpers_module is not None
        migrated = add_from_lines(migrated, {options.helpers_module: dict.fromkeys(sorted(shared))})
    helpers = _constants_first([source for name, source in wanted.items() if name not in shared])
    for source in [*ctx.module_prologue, *helpers]:
        used |= used_names(ast.parse(source))
    requested = [*ctx.new_imports.items(), *ctx.more_imports]
    # Only module-level imports bind names for module-level code and helpers.
    existing = scopes.module_imports() - ctx.hoisted
    imports = [(m, a) for m, a in requested if (a or m.split(".")[0]) in used]
    # `import a.b` adds nothing next to an `import a.b as c`: `a` is bound on its own.
    loaded = {m for m, a in [*existing, *imports] if a is not None}
    imports = [(m, a) for m, a in imports if not (a is None and "." in m and m in loaded)]
    if imports or helpers or ctx.module_prologue:
        local = frozenset({ctx.mesh_program.module} if ctx.mesh_program is not None else ())
        migrated = add_module_level(migrated, imports, existing, [*ctx.module_prologue, *helpers], local)
    if ctx.hoisted:
        migrated = drop_later_duplicates(migrated, ctx.hoisted)
    if migrated is traversed:
        return renamed(printed, own), shared  # parsed above
    code = renamed(printer.code(migrated), own)
    ast.parse(code)
    return code, shared


class _DeviceLookups(Transformer):
    """Replaces the written-out device lookups of a module by `name`, and counts them."""

    def __init__(self, lookup: str, name: str, keep: cst.CSTNode | None = None) -> None:
        super().__init__()
        self.lookup, self.name, self.keep, self.found = lookup, name, keep, 0

    def leave_BooleanOperation(self, original_node: cst.BooleanOperation, updated_node: cst.BooleanOperation) -> cst.BaseExpression:
        if original_node is self.keep or _EMPTY_MODULE.code_for_node(updated_node.with_changes(lpar=[], rpar=[])) != self.lookup:
            return updated_node
        self.found += 1
        return cst.Name(self.name)


_EMPTY_MODULE = cst.Module(body=[])


def _device_once(module: cst.Module, ctx: MigrationContext, printed: str) -> tuple[cst.Module, tuple[str, str] | None]:
    """A script that looks the device up in several places reads it from one module constant
    (`DEVICE = torch.accelerator.current_accelerator(...) or torch.device("cpu")`), as one would
    write it by hand: the lookup gives the same device wherever it runs. `printed` is the module's
    code (cheap to count in)."""
    torch = ctx.spelled_torch()
    lookup = ctx.target.device(torch)
    if ctx.source.count("current_accelerator") or printed.count(lookup) < 2:
        return module, None  # none or one, or the file's own lookups: they stay as written
    assert ctx.scopes is not None
    if ("torch", None if torch == "torch" else torch) not in ctx.scopes.module_imports() and ctx.new_imports.get("torch", ...) != (None if torch == "torch" else torch):
        return module, None  # torch is imported in functions only: no module constant can use it

    def looked_up_before(end: int) -> bool:
        return any(lookup in _EMPTY_MODULE.code_for_node(statement) for statement in module.body[:end])

    own = _module_variable_holding(module, lookup, printed)
    if own is not None:
        # The file keeps the device in a module variable: the lookups read it, where it is set first.
        statement, value, name = own
        if looked_up_before(module.body.index(statement)):
            return module, None
        replacer = _DeviceLookups(lookup, name, keep=value)
        constant = None
    else:
        if looked_up_before(_import_block_end(module)):
            return module, None  # a lookup among the imports would run before the constant is set
        name = ctx.unused_name("DEVICE")
        replacer = _DeviceLookups(lookup, name)
        constant = (name, f"{name} = {lookup}\n")
    replaced = transform(module, replacer, PUNCTUATION)
    if replacer.found < 2:
        return module, None
    assert isinstance(replaced, cst.Module)
    return replaced, constant


def _import_block_end(module: cst.Module) -> int:
    """Where the statements added after the imports go: after the last import before any def."""
    end = 0
    for index, statement in enumerate(module.body):
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            break
        if isinstance(statement, cst.SimpleStatementLine) and any(isinstance(s, cst.Import | cst.ImportFrom) for s in statement.body):
            end = index + 1
    return end


def _module_variable_holding(module: cst.Module, lookup: str, code: str) -> tuple[cst.CSTNode, cst.CSTNode, str] | None:
    """The module-level `NAME = <lookup>` statement, its value and NAME, where NAME is assigned
    nowhere else in `code` (the module's text)."""
    for statement in module.body:
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        small = statement.body[0]
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and isinstance(small.value, cst.BooleanOperation)
            and _EMPTY_MODULE.code_for_node(small.value) == lookup
        ):
            name = small.targets[0].target.value
            if len(re.findall(rf"(?m)^\s*{name}\s*(?::[^=]*)?=[^=]|\bglobal\b[^\n]*\b{name}\b", code)) == 1:
                return statement, small.value, name
    return None


def _own_copies(helpers: dict[str, str], tree: ast.Module) -> dict[str, str]:
    """The helpers (`run_on_each_process_2`) the original defines already under their first name
    (`run_on_each_process`), word for word but for that name and the names of such helpers it
    calls (`broadcast_master_param_2`): new name -> the file's."""
    defined = {
        node.name: ast.dump(node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }
    found: dict[str, str] = {}
    while True:  # a helper is the file's own once the helpers it calls are found to be
        more = {}
        for name, source in helpers.items():
            first = re.sub(r"_\d+$", "", name)
            if first == name or first not in defined or name in found:
                continue
            names = {**found, name: first}
            copy = ast.parse(renamed(source, names).replace(f"def {name}(", f"def {first}(").replace(f"class {name}(", f"class {first}("))
            if len(copy.body) == 1 and ast.dump(copy.body[0]) == defined[first]:
                more[name] = first
        if not more:
            return found
        found.update(more)


def _helpers_used(helpers: dict[str, str], used: set[str]) -> dict[str, str]:
    """The helpers the migrated code uses, and those they use in turn, in the order they were asked for."""
    wanted: set[str] = set()
    pending = [name for name in helpers if name in used]
    while pending:
        name = pending.pop()
        if name not in wanted:
            wanted.add(name)
            pending.extend(n for n in used_names(ast.parse(helpers[name])) if n in helpers)
    return {name: source for name, source in helpers.items() if name in wanted}


def _constants_first(helpers: list[str]) -> list[str]:
    """Module constants (`LOCAL_RANK = int(...)`) in one group above the helper functions and
    classes, in the order they were asked for, unless a constant needs one of those helpers."""
    trees = [ast.parse(source).body for source in helpers]
    constants = [all(isinstance(s, ast.Assign | ast.AnnAssign) for s in body) for body in trees]
    defined = {s.name for body in trees for s in body if isinstance(s, ast.FunctionDef | ast.ClassDef)}
    if any(used_names(ast.Module(body=body, type_ignores=[])) & defined for body, c in zip(trees, constants, strict=True) if c):
        return helpers
    return [h for h, c in zip(helpers, constants, strict=True) if c] + [h for h, c in zip(helpers, constants, strict=True) if not c]
