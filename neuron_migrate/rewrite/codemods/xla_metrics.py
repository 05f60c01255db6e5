"""NM007: XLA metrics reports and profiler servers go; traces become `record_function`."""

from __future__ import annotations

from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.cst_children import children
from neuron_migrate.rewrite.codemods.base import Codemod, code_of, expr

MET = "torch_xla.debug.metrics"
XP = "torch_xla.debug.profiler"
REPORTS = (f"{MET}.metrics_report", f"{MET}.short_metrics_report", "torch_xla._XLAC._xla_metrics_report")
CLEARS = (f"{MET}.clear_all", f"{MET}.clear_counters", f"{MET}.clear_metrics")
PROFILER_SERVER = (f"{XP}.start_server",)
TRACES = (f"{XP}.Trace", f"{XP}.StepTrace")


# Calls whose only effect is to write their arguments out.
OUTPUT_FUNCTIONS = ("print", "torch_xla.core.xla_model.master_print")
OUTPUT_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log", "write", "print"})


class XlaMetrics(Codemod):
    """Removes XLA metrics reports and profiler servers; maps profiler traces.

    ## What it does
    Deletes statements whose whole effect is to print or log `met.metrics_report()` /
    `met.short_metrics_report()` (with strings around it at most), `met.clear_all()` and
    friends, and `xp.start_server(port)`.
    `with xp.Trace("fwd"):` and `xp.StepTrace("train", step_num=i)` become
    `torch.profiler.record_function(...)`.

    ## Why
    These report on the XLA lazy-tensor runtime (graph compiles, transfers, fallbacks), which
    no longer exists. Native compile behaviour is seen with `TORCH_LOGS=recompiles,graph_breaks`
    or `torch._dynamo.explain`, and traces with `torch.profiler`.

    ## Example
    ```python
    xm.master_print(met.metrics_report())
    ```

    ## Use instead
    Nothing, or `torch._dynamo.utils.counters` for compile counts.

    ## Fix safety
    Safe: only diagnostic output is removed. A report used any other way (kept in a list,
    printed with other values, returned) stays, with a TODO, as does reading individual counters
    (`met.counter_value("CompileTime")`, `met.metric_data(...)`): tests that assert compile
    counts need a new oracle.
    """

    code = "NM007"
    name = "xla-metrics"
    summary = "XLA metrics reports and profiler servers removed; traces -> `record_function`"
    triggers = (MET, XP, "torch_xla.test.test_utils", "torch_xla._XLAC._xla_metrics_report")
    manual: ClassVar[dict[str, str]] = {
        MET: "XLA metrics are gone: count compiles with `torch._dynamo.utils.counters` or `TORCH_LOGS=recompiles`",
        XP: "use `torch.profiler.profile(...)` for traces",
        f"{MET}.executed_fallback_ops": "lists ops torch_xla ran on the CPU: remove the check (see `torch._dynamo.explain`)",
        f"{XP}.start_server": "`{name}`: record traces with `torch.profiler.profile(on_trace_ready=tensorboard_trace_handler(log_dir))`",
        "torch_xla._XLAC": "private torch_xla runtime call; no native equivalent",
    }

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        value = updated_node.value
        if self._is_report(value) or self._outputs_report(value):
            self.changed("removed an XLA metrics report")
            return self.ctx.remove(updated_node)
        if isinstance(value, cst.Call) and self.qualify(value.func) in CLEARS + PROFILER_SERVER:
            self.changed(f"removed `{code_of(value.func)}(...)`")
            return self.ctx.remove(updated_node)
        return updated_node

    def _outputs_report(self, value: cst.BaseExpression) -> bool:
        """`print(met.metrics_report())`, `logger.info("metrics:\\n%s", met.metrics_report())`: a call
        that only writes out a report, and strings."""
        if not isinstance(value, cst.Call) or any(arg.star for arg in value.args):
            return False
        func = value.func
        output = self.qualify(func) in OUTPUT_FUNCTIONS or (
            isinstance(func, cst.Name) and func.value == "print"
        ) or (isinstance(func, cst.Attribute) and func.attr.value in OUTPUT_METHODS)
        positional = [arg.value for arg in value.args if arg.keyword is None]
        return (
            output
            and any(self._has_report(arg) for arg in positional)
            and all(self._report_only(arg) for arg in positional)
        )

    def _is_report(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Call) and self.qualify(node.func) in REPORTS

    def _has_report(self, node: cst.CSTNode) -> bool:
        return self._is_report(node) or any(self._has_report(child) for child in children(node))

    def _report_only(self, node: cst.BaseExpression) -> bool:
        """A report, a string, or strings joined or formatted from nothing else."""
        if self._is_report(node):
            return True
        if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
            return True
        if isinstance(node, cst.FormattedString):
            return all(
                not isinstance(part, cst.FormattedStringExpression) or self._report_only(part.expression)
                for part in node.parts
            )
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            return self._report_only(node.left) and self._report_only(node.right)
        return False

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.qualify(updated_node.func) in TRACES and updated_node.args:
            self.changed(f"`{code_of(updated_node.func)}(name)` -> `torch.profiler.record_function(name)`")
            return expr(f"{self.ctx.torch()}.profiler.record_function({code_of(updated_node.args[0].value)})")
        return updated_node
