"""Compile behaviour of a program: how many graphs it compiles, why it recompiles, where it breaks.

The counting happens in the child (`child/neuron_migrate_capture.py`): XLA's own metrics on the old
stack, a stand-in `neuron` dynamo backend on the new one. This module turns the manifests into
"original: 37 graphs for 40 steps; migrated: 2".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from neuron_migrate.validate.runner import Run


@dataclass
class CompileSummary:
    label: str
    script: str
    steps: int
    graphs: int | None  # None: nothing was compiled by either mechanism
    kind: str  # "XLA" | "neuron (stand-in)" | "-"
    recompiles: int = 0
    graph_breaks: int = 0
    executions: int | None = None
    recompile_reasons: list[tuple[str, int]] = field(default_factory=list)
    graph_break_reasons: list[tuple[str, int]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    def headline(self) -> str:
        steps = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        if self.graphs is None:
            return f"{self.label}: nothing compiled ({steps}, eager)"
        text = f"{self.label}: {self.graphs} {self.kind} graph{'s' if self.graphs != 1 else ''} for {steps}"
        if self.kind != "XLA":
            text += f", {self.recompiles} recompiles, {self.graph_breaks} graph breaks"
        elif self.executions is not None:
            text += f" ({self.executions} executions)"
        if self.rejected:
            text += f"; REJECTED {len(self.rejected)} graph(s) with dynamic shapes"
        return text

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def summarise(run: Run) -> CompileSummary:
    """Rank 0 of the run (every rank of a data-parallel run compiles the same graphs)."""
    label, script = run.program.label, str(run.program.script)
    if not run.captures:
        return CompileSummary(label, script, 0, None, "-")
    manifest = run.captures[0].manifest
    steps = int(manifest.get("optimizer_steps") or manifest.get("backward_calls") or 0)
    dynamo = manifest.get("compile") or {}
    xla = manifest.get("xla_metrics") or {}
    if dynamo.get("graphs") or dynamo.get("rejected"):
        return CompileSummary(
            label,
            script,
            steps,
            int(dynamo["graphs"]),
            "neuron (stand-in)",
            recompiles=int(dynamo.get("recompiles", 0)),
            graph_breaks=int(dynamo.get("graph_breaks", 0)),
            recompile_reasons=Counter(dynamo.get("recompile_reasons", [])).most_common(),
            graph_break_reasons=sorted(
                dynamo.get("graph_break_reasons", {}).items(), key=lambda kv: -kv[1]
            ),
            rejected=list(dynamo.get("rejected", [])),
        )
    if xla.get("CompileTime"):
        return CompileSummary(
            label,
            script,
            steps,
            int(xla["CompileTime"]),
            "XLA",
            executions=int(xla.get("ExecuteTime", 0)),
        )
    return CompileSummary(label, script, steps, None, "-")


def format_summaries(summaries: list[CompileSummary], limit: int = 5) -> str:
    lines = [
        "compile behaviour (stand-in `neuron` backend: static shapes only, like the real one):"
    ]
    for s in summaries:
        lines.append(f"  {s.headline()}")
        for reason, count in s.recompile_reasons[:limit]:
            lines.append(f"      recompile x{count}: {reason}")
        for reason, count in s.graph_break_reasons[:limit]:
            lines.append(f"      graph break x{count}: {reason}")
        for message in s.rejected[:limit]:
            lines.append(f"      rejected: {message}")
    if len(summaries) == 2 and all(s.graphs is not None for s in summaries):
        a, b = summaries
        lines.append(f"  => {a.label}: {a.graphs} graphs; {b.label}: {b.graphs}")
    return "\n".join(lines)
