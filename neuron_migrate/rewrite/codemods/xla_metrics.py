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


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    found = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call):
            found.append(current)
        stack.extend(children(current))
    return found


class XlaMetrics(Codemod):
    """Removes XLA metrics reports and profiler servers; maps profiler traces.

    ## What it does
    Deletes statements that print or log `met.metrics_report()` /
    `met.short_metrics_report()`, `met.clear_all()` and friends, and `xp.start_server(port)`.
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
    Safe: only diagnostic output is removed. Reading individual counters
    (`met.counter_value("CompileTime")`, `met.metric_data(...)`) gets a TODO, since tests that
    assert compile counts need a new oracle.
    """

    code = "NM007"
    name = "xla-metrics"
    summary = "XLA metrics reports and profiler servers removed; traces -> `record_function`"
    triggers = (MET, XP, "torch_xla.test.test_utils", "torch_xla._XLAC._xla_metrics_report")
    manual: ClassVar[dict[str, str]] = {
        MET: "XLA runtime metrics are gone; count compiles with `torch._dynamo.utils.counters` or `TORCH_LOGS=recompiles`",
        XP: "use `torch.profiler.profile(...)` for traces",
        f"{MET}.executed_fallback_ops": "lists the ops torch_xla ran on the CPU; there is no native counterpart, remove the check (graph breaks show with `torch._dynamo.explain`)",
        f"{XP}.start_server": "`{name}` served traces to TensorBoard; record them with `torch.profiler.profile(on_trace_ready=torch.profiler.tensorboard_trace_handler(log_dir))`",
        "torch_xla._XLAC": "private torch_xla runtime call; no native equivalent",
    }

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        names = {self.qualify(call.func) for call in _calls(updated_node.value)}
        if names & set(REPORTS):
            self.changed("removed an XLA metrics report")
            return self.ctx.remove(updated_node)
        if isinstance(updated_node.value, cst.Call) and names & set(CLEARS + PROFILER_SERVER):
            self.changed(f"removed `{code_of(updated_node.value.func)}(...)`")
            return self.ctx.remove(updated_node)
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.qualify(updated_node.func) in TRACES and updated_node.args:
            self.changed(f"`{code_of(updated_node.func)}(name)` -> `torch.profiler.record_function(name)`")
            return expr(f"{self.ctx.torch()}.profiler.record_function({code_of(updated_node.args[0].value)})")
        return updated_node
