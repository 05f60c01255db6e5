"""Device loaders whose batches the loop moves itself.

`for x, y in MpDeviceLoader(loader, device): x, y = x.to(device), y.to(device)` moves each batch
twice; once the XLA loader is gone the loop's own `.to(device)` is all it takes, and the plain
loader is what a person would write. A loader qualifies only when every use of it is `len()` or
such a loop, and the loop moves every name it unpacks to the loader's own device before reading
it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from neuron_migrate.rewrite.codemods.base import arg_value, code_of, dotted_name

# Wrappers a loop may put around the loader: the batch comes out unchanged (`enumerate` pairs it
# with a count).
PASS_THROUGH = frozenset({"tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm"})


def loaders_moved_by_their_loops(
    scope: cst.Module | cst.FunctionDef, is_loader: Callable[[cst.Call], bool]
) -> set[int]:
    """The ids of the loader calls in `scope` (`is_loader`) that can become the loader they wrap."""
    found: set[int] = set()
    body = scope.body if isinstance(scope, cst.Module) else scope.body.body
    for statement in _statements(body):
        if isinstance(statement, cst.For) and isinstance(statement.iter, cst.Call):
            loader, enumerated = _unwrapped(statement.iter)
            if isinstance(loader, cst.Call) and is_loader(loader) and _moves(statement, enumerated, _device(loader)):
                found.add(id(loader))
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
                and isinstance(small.value, cst.Call)
                and is_loader(small.value)
                and _only_moving_loops(scope, small.targets[0].target.value, _device(small.value))
            ):
                found.add(id(small.value))
    return found


def _statements(body: object) -> Iterator[cst.CSTNode]:
    """Every statement of a block, nested blocks included, but not those of nested functions or
    classes (their names are their own)."""
    for statement in body:  # type: ignore[attr-defined]
        yield statement
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            continue
        for block in _blocks(statement):
            yield from _statements(block)


def _blocks(statement: cst.CSTNode) -> Iterator[object]:
    if not isinstance(statement, cst.BaseCompoundStatement):
        return
    yield statement.body.body
    for part in (getattr(statement, "orelse", None), getattr(statement, "finalbody", None)):
        if isinstance(part, cst.If):
            yield [part]
        elif part is not None:
            yield part.body.body
    for handler in getattr(statement, "handlers", ()):
        yield handler.body.body


def _device(loader: cst.Call) -> str | None:
    device = arg_value(loader, 1, "device")
    return code_of(device.value) if device is not None else None


def _unwrapped(iterable: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
    """What a loop iterates once `enumerate` and progress bars are taken off, and whether
    `enumerate` paired it with a count."""
    enumerated = False
    while isinstance(iterable, cst.Call) and iterable.args and iterable.args[0].keyword is None:
        name = dotted_name(iterable.func)
        if name == "enumerate" and not enumerated:
            enumerated = True
        elif name not in PASS_THROUGH:
            break
        iterable = iterable.args[0].value
    return iterable, enumerated


def _only_moving_loops(scope: cst.CSTNode, name: str, device: str | None) -> bool:
    """Every read of `name` in `scope` is `len(name)` or a loop over it that moves its batches."""
    uses = _Reads(name)
    scope.visit(uses)
    return bool(uses.loops) and not uses.other and all(_moves(loop, enumerated, device) for loop, enumerated in uses.loops)


class _Reads(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.loops: list[tuple[cst.For, bool]] = []
        self.other = 0
        self._seen: set[int] = set()

    def visit_For(self, node: cst.For) -> None:
        loader, enumerated = _unwrapped(node.iter)
        if isinstance(loader, cst.Name) and loader.value == self.name:
            self.loops.append((node, enumerated))
            self._seen.add(id(loader))

    def visit_Call(self, node: cst.Call) -> None:
        if dotted_name(node.func) == "len" and len(node.args) == 1:
            value = node.args[0].value
            if isinstance(value, cst.Name) and value.value == self.name:
                self._seen.add(id(value))

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name) and target.target.value == self.name:
                self._seen.add(id(target.target))

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and id(node) not in self._seen:
            self.other += 1


def _moves(loop: cst.For, enumerated: bool, device: str | None) -> bool:
    """The loop moves every name it unpacks from a batch to `device` before it reads it."""
    target: cst.BaseExpression = loop.target
    if enumerated:
        if not (isinstance(target, cst.Tuple | cst.List) and len(target.elements) == 2):
            return False
        target = target.elements[1].value
    names = _names(target)
    if device is None or not names:
        return False
    waiting = set(names)
    for statement in loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ():
        moved = _moved_names(statement, device)
        if moved is None:
            if any(isinstance(n, cst.Name) and n.value in waiting for n in _all_names(statement)):
                return False
            continue
        waiting -= moved
        if not waiting:
            return True
    return False


def _names(target: cst.BaseExpression) -> list[str] | None:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Tuple | cst.List):
        names: list[str] = []
        for element in target.elements:
            inner = _names(element.value)
            if inner is None:
                return None
            names += inner
        return names
    return None


def _moved_names(statement: cst.CSTNode, device: str) -> set[str] | None:
    """The names `x = x.to(device)` (or `x, y = x.to(device), y.to(device)`) moves; None for any
    other statement."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    assign = statement.body[0]
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
        return None
    target, value = assign.targets[0].target, assign.value
    pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]]
    if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(target.elements) == len(value.elements):
        pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]
    else:
        pairs = [(target, value)]
    moved: set[str] = set()
    for name, moving in pairs:
        if not (isinstance(name, cst.Name) and _moved_to(moving, name.value, device)):
            return None
        moved.add(name.value)
    return moved


def _moved_to(value: cst.BaseExpression, name: str, device: str) -> bool:
    """`name.to(device, ...)`, possibly followed by further calls (`.float()`), or a dict batch
    moved value by value: `{k: v.to(device) for k, v in name.items()}`."""
    if isinstance(value, cst.DictComp):
        loop = value.for_in
        target = loop.target
        return (
            loop.inner_for_in is None
            and not loop.ifs
            and isinstance(loop.iter, cst.Call)
            and isinstance(loop.iter.func, cst.Attribute)
            and loop.iter.func.attr.value == "items"
            and isinstance(loop.iter.func.value, cst.Name)
            and loop.iter.func.value.value == name
            and isinstance(target, cst.Tuple)
            and len(target.elements) == 2
            and isinstance(target.elements[1].value, cst.Name)
            and _moved_to(value.value, target.elements[1].value.value, device)
        )
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        func = value.func
        if func.attr.value == "to" and isinstance(func.value, cst.Name) and func.value.value == name:
            given = arg_value(value, 0, "device")
            return given is not None and code_of(given.value) == device
        value = func.value
    return False


def _all_names(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    collector = _Names()
    node.visit(collector)
    return iter(collector.found)


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.Name] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.found.append(node)
