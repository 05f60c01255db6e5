"""NM002: lazy-tensor step boundaries and step closures go; eager code needs none."""

from __future__ import annotations

from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    arg_value,
    code_of,
    dotted_name,
    expr,
    stmt,
)
from neuron_migrate.rewrite.codemods.timing import TimerFences, fence_only, fences_before_timer

MARK_STEP = (
    "torch_xla.core.xla_model.mark_step",
    "torch_xla.sync",
)
WAIT_DEVICE_OPS = ("torch_xla.core.xla_model.wait_device_ops",)
FENCES = (*MARK_STEP, *WAIT_DEVICE_OPS)
STEP_CLOSURE = ("torch_xla.core.xla_model.add_step_closure",)
STEP_CONTEXT = ("torch_xla.step", "torch_xla.experimental.eager_mode_context")
# Materialising lazy tensors: eager ones already are.
UNLAZY = ("torch_xla.core.xla_model.unlazy",)
EAGER_TOGGLES = (
    "torch_xla.experimental.eager_mode",
    "torch_xla.experimental.eager.eager_mode",
    "torch_xla._XLAC._set_use_eager_mode",
)
COMPILE = ("torch_xla.compile", "torch_xla.experimental.compile")


def _waits(call: cst.Call) -> bool:
    """`xm.mark_step(wait=True)`: the step also waited for the device to finish."""
    wait = arg_value(call, 0, "wait")
    return wait is not None and code_of(wait.value) == "True"


def _takes_nothing(fn: cst.Lambda) -> bool:
    params = fn.params
    return not (params.params or params.posonly_params or params.kwonly_params) and isinstance(
        params.star_arg, cst.MaybeSentinel
    ) and params.star_kwarg is None


class XlaSync(Codemod):
    """Removes lazy-tensor step boundaries and turns step closures into plain calls.

    ## What it does
    Deletes `xm.mark_step()` / `torch_xla.sync()` statements, eager-mode toggles
    (`torch_xla.experimental.eager_mode(True)`) and `xm.unlazy([loss])` of names (one that
    computes its argument keeps it, with a TODO); unwraps `with torch_xla.step():`; turns
    `xm.add_step_closure(fn, args=(a, b))` into `fn(a, b)` (a closure `lambda: f(x)` into `f(x)`); `xm.wait_device_ops()` into
    `torch.accelerator.synchronize()`; `torch_xla.compile(fn)` into
    `torch.compile(fn, dynamic=False)`. A `mark_step()` right before a clock read
    (`time.perf_counter()`, `time.time()`, `timeit.default_timer()`), or called with `wait=True`,
    becomes a synchronize too; when it ended every step of a loop timed after the loop, one
    synchronize after the loop replaces it.

    ## Why
    Native PyTorch on Trainium runs eagerly: each op executes when it is called, so there is no
    pending graph to cut, and a closure's tensors are already materialized when it runs.

    ## Example
    ```python
    loss.backward()
    xm.optimizer_step(optimizer)
    xm.add_step_closure(log, args=(step, loss))
    xm.mark_step()
    ```

    ## Use instead
    ```python
    loss.backward()
    optimizer.step()
    log(step, loss)
    ```

    ## Fix safety
    Safe. A step closure now runs synchronously in the step: if it calls `.item()` it waits for
    the device there (the report says so). Comments above a removed `mark_step()` are kept.
    `mark_step` passed as a value (a callback) is left with a TODO. Natively an accelerator runs
    ops asynchronously, so a clock read after a removed step boundary would time only the
    launch: that is why those become `torch.accelerator.synchronize()`, guarded by
    `torch.accelerator.is_available()` in the portable target since it raises on a machine
    without an accelerator. An `if` left empty goes with its test, unless the test calls
    something (`if save_checkpoint(model, path): xm.mark_step()` keeps `save_checkpoint(model, path)`).
    """

    code = "NM002"
    name = "xla-step"
    summary = "`mark_step`/`sync` go, step closures become calls, `torch_xla.step()` unwraps"
    triggers = (*MARK_STEP, *WAIT_DEVICE_OPS, *STEP_CLOSURE, *STEP_CONTEXT, *EAGER_TOGGLES, *COMPILE, *UNLAZY)
    manual: ClassVar[dict[str, str]] = {
        "torch_xla.core.xla_model.mark_step": "`{name}` is used as a value (a callback?): eager execution needs no step boundary, remove it",
        "torch_xla.sync": "`{name}` is used as a value (a callback?): eager execution needs no step boundary, remove it",
        "torch_xla.core.xla_model.optimization_barrier_": "no native equivalent; remove it and check the memory behaviour",
        "torch_xla.core.xla_model.unlazy": "no native equivalent (eager tensors are already materialized); remove it",
    }

    fences = TimerFences()

    def visit_Module(self, node: cst.Module) -> None:
        self.fences = fences_before_timer(node, self.qualify, FENCES)
        self._functions: dict[int, cst.FunctionDef] = {}  # bodies not yet entered -> their function

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions[id(node.body)] = node

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._function_fences(node)

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
        self._function_fences(node)

    def _function_fences(self, body: cst.BaseSuite) -> None:
        """In a function's body, names resolve in the function's own scope (`import torch_xla`
        inside it), which the module-level search could not see."""
        function = self._functions.pop(id(body), None)
        if function is None:
            return
        own = fences_before_timer(function, self.qualify, FENCES)
        self.fences.statements.update(own.statements)
        self.fences.loops |= own.loops
        # A helper that only fences: its callers wait through it, maybe to read the clock.
        self.fences.statements.update(dict.fromkeys(fence_only(function, self.qualify, FENCES), False))

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = updated_node.value
        if not isinstance(call, cst.Call):
            return updated_node
        name = self.qualify(call.func)
        in_line = self.fences.statements.get(id(original_node))
        if name in MARK_STEP and (in_line is not None or _waits(call)):
            # It made the host wait for the device, before a timer read or on request.
            self.changed(f"`{code_of(call.func)}()` before a timer -> `torch.accelerator.synchronize()`")
            return self._synchronize(updated_node, bool(in_line))
        if name in MARK_STEP:
            self.changed(f"removed `{code_of(call.func)}()`: eager execution has no step boundary")
            return self.ctx.remove(updated_node)
        if name in EAGER_TOGGLES or (name in UNLAZY and all(_read_only(arg.value) for arg in call.args)):
            self.changed(f"removed `{code_of(call.func)}(...)`: native PyTorch is eager, its tensors already computed")
            return self.ctx.remove(updated_node)
        if name in WAIT_DEVICE_OPS:
            return self._wait_device_ops(updated_node, bool(in_line))
        return updated_node

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        self._wait_after_loop(original_node)
        return updated_node

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> cst.While:
        self._wait_after_loop(original_node)
        return updated_node

    def _wait_after_loop(self, loop: cst.For | cst.While) -> None:
        """Each step ended with a step boundary and the clock is read after the loop: wait once."""
        if id(loop) in self.fences.loops:
            self.changed("the step boundary a timer read waited for -> `torch.accelerator.synchronize()` after the loop")
            self.ctx.insert_after(self._synchronize_statement())

    def _wait_device_ops(self, node: cst.Expr, in_line: bool) -> Any:
        self.changed("`xm.wait_device_ops()` -> `torch.accelerator.synchronize()`")
        return self._synchronize(node, in_line)

    def _synchronize(self, node: cst.Expr, in_line: bool) -> Any:
        """`torch.accelerator.synchronize()` in place of `node`; `in_line`: more of its line follows."""
        torch = self.ctx.torch()
        if self.ctx.target.neuron:
            return node.with_changes(value=expr(f"{torch}.accelerator.synchronize()"))
        if in_line:  # `a; xm.mark_step(); t = time.time()`: the wait must stay between them
            return node.with_changes(value=expr(f"{torch}.accelerator.is_available() and {torch}.accelerator.synchronize()"))
        self.ctx.insert_after(self._synchronize_statement())
        return self.ctx.remove(node)

    def _synchronize_statement(self) -> cst.BaseStatement:
        torch = self.ctx.torch()
        if self.ctx.target.neuron:
            return stmt(f"{torch}.accelerator.synchronize()\n")
        # On a machine without an accelerator, synchronize() raises: guard it.
        return stmt(f"if {torch}.accelerator.is_available():\n    {torch}.accelerator.synchronize()\n")

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name in STEP_CLOSURE:
            return self._closure(updated_node)
        if name in COMPILE:
            return self._compile(updated_node)
        return updated_node

    def _closure(self, call: cst.Call) -> cst.BaseExpression:
        fn = arg_value(call, 0, "closure")
        if fn is None:
            return call
        args = arg_value(call, 1, "args")
        new_args: list[cst.Arg] = []
        if args is not None:
            value = args.value
            if isinstance(value, cst.Tuple | cst.List):
                new_args = [cst.Arg(value=e.value) for e in value.elements if isinstance(e, cst.Element)]
                if any(isinstance(e, cst.StarredElement) for e in value.elements):
                    new_args = [cst.Arg(value=value, star="*")]
            else:
                new_args = [cst.Arg(value=value, star="*")]
        self.changed("`xm.add_step_closure(fn, args)` -> `fn(*args)` (runs synchronously now)")
        self.ctx.note(
            self.code,
            "step closures now run synchronously inside the step; `.item()` in them waits for the device",
        )
        callee = fn.value
        if isinstance(callee, cst.Lambda) and not new_args and _takes_nothing(callee):
            # `add_step_closure(lambda: f(x))` runs `f(x)`: call it directly, not through a lambda.
            return self.ctx.group(callee.body)
        if isinstance(callee, cst.Lambda | cst.BooleanOperation | cst.IfExp):
            callee = callee.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return cst.Call(func=callee, args=new_args)

    def _compile(self, call: cst.Call) -> cst.BaseExpression:
        torch = self.ctx.torch()
        fn = arg_value(call, 0, "f")
        if fn is None:
            return call  # the context-manager form is handled by leave_With
        kept = [fn.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT, comma=cst.MaybeSentinel.DEFAULT)]
        backend = ', backend="neuron"' if self.ctx.target.neuron else ""
        self.changed("`torch_xla.compile(fn)` -> `torch.compile(fn, dynamic=False)`")
        return expr(f"{torch}.compile({code_of(kept[0].value)}{backend}, dynamic=False)")

    def leave_With(self, original_node: cst.With, updated_node: cst.With) -> Any:
        items = list(updated_node.items)
        kept = [
            item
            for item in items
            if not (
                isinstance(item.item, cst.Call)
                and self.qualify(item.item.func) in (*STEP_CONTEXT, *COMPILE)
                and item.asname is None
            )
        ]
        if len(kept) == len(items):
            return updated_node
        self.changed("unwrapped `with torch_xla.step():` (eager code needs no step scope)")
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated_node.with_changes(items=kept)
        body = updated_node.body
        statements: list[cst.BaseStatement]
        if isinstance(body, cst.SimpleStatementSuite):
            statements = [cst.SimpleStatementLine(body=body.body)]
        else:
            statements = [s for s in body.body if isinstance(s, cst.BaseStatement)]
        # Comments at the end of the block move up rather than vanish.
        footer = [line for line in getattr(body, "footer", ()) if line.comment is not None]
        first = statements[0]
        assert isinstance(first, cst.SimpleStatementLine | cst.BaseCompoundStatement)
        statements[0] = first.with_changes(
            leading_lines=[*updated_node.leading_lines, *footer, *first.leading_lines]
        )
        return cst.FlattenSentinel(statements)


def _read_only(value: cst.BaseExpression) -> bool:
    """A name, an attribute or a list of them: evaluating it does nothing (safe to drop)."""
    if isinstance(value, cst.List | cst.Tuple):
        return all(isinstance(e, cst.Element) and _read_only(e.value) for e in value.elements)
    return dotted_name(value) is not None
