"""Shell lines and `%env` magics in notebooks that configure or launch old-stack work.

`!PJRT_DEVICE=NEURON XLA_USE_BF16=1 torchrun ...` loses its XLA variables, `%env PJRT_DEVICE=...`
goes, and the steps that only exist on the XLA stack (`neuron_parallel_compile` pre-compilation,
`optimum-cli export neuron`, the Neuron compile cache) are replaced by a comment saying why.
Everything else is left exactly as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from neuron_migrate.core.oldstack import PRECISION, REMOVED_STEPS, XLA_VARIABLE

_ENV_MAGIC = re.compile(r"^%(?:env|set_env)\s+([A-Za-z_]\w*)(?:\s*=\s*|\s+)?(.*)$")
_SHELL = re.compile(r"^(!{1,2}\s*)(.*)$", re.S)
_ASSIGNMENT = re.compile(r"""([A-Za-z_]\w*)=(?:'[^']*'|"[^"]*"|\S*)\s*""")


@dataclass(frozen=True)
class ShellRewrite:
    line: str  # the new line (a comment when the step is gone)
    message: str  # what changed, for the report
    code: str = "NM009"  # environment (NM009) or a launch step (NM005)
    precision: bool = False  # an XLA bf16 switch was dropped


def rewrite_shell_line(line: str) -> ShellRewrite | None:
    """The migrated form of one `!`/`%env` line, or None when it needs nothing."""
    stripped = line.strip()
    env = _ENV_MAGIC.match(stripped)
    if env and XLA_VARIABLE.match(env.group(1)):
        name = env.group(1)
        return ShellRewrite(
            f"# (removed `%env {name}`: it configured the XLA runtime)",
            f"removed `%env {name}`",
            precision=name in PRECISION,
        )
    shell = _SHELL.match(stripped)
    if not shell:
        return None
    prefix, command = shell.groups()
    kept: list[str] = []
    dropped: list[str] = []
    position = 0
    while True:
        match = _ASSIGNMENT.match(command, position)
        if not match:
            break
        (dropped if XLA_VARIABLE.match(match.group(1)) else kept).append(match.group(0))
        position = match.end()
    rest = command[position:]
    for step, why in REMOVED_STEPS.items():
        if rest.startswith(step):
            return ShellRewrite(f"# (removed: {why})", f"removed a `{step}` step", code="NM005")
    if not dropped:
        return None
    names = [d.split("=", 1)[0] for d in dropped]
    return ShellRewrite(
        prefix + "".join(kept) + rest,
        f"removed {', '.join(names)} from a shell command",
        precision=any(n in PRECISION for n in names),
    )
