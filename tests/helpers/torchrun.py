"""Running a program under torchrun in a test, past the one abort that is torch's, not the program's.

The CPU build's gloo process groups can abort a worker as its interpreter exits, after the
program has finished and written what it wrote: a C++ thread still joinable at finalization,
`terminate called without an active exception`, SIGABRT (only under load, and then not rare: a
busy machine can abort two launches in a row). A launch that ends so is run again, up to
`LAUNCHES` times in all; any other failure fails the test as before.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

TEARDOWN_ABORT = "terminate called without an active exception"
# How torchrun's failure summary reports a worker killed so, when its own output is not shown.
ABORT_REPORTED = "(SIGABRT)"
LAUNCHES = 4

# One launch, or several made together (the nodes of one run).
Launched = TypeVar("Launched", subprocess.CompletedProcess[str], list[subprocess.CompletedProcess[str]])


def aborted_at_exit(output: str) -> bool:
    return TEARDOWN_ABORT in output or ABORT_REPORTED in output


def run(command: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(command, capture_output=True, text=True, **kwargs)`, past that abort."""
    return again_after_abort(lambda: subprocess.run(command, capture_output=True, text=True, **kwargs))


def again_after_abort(launch: Callable[[], Launched]) -> Launched:
    """`launch()`, again while it (or one of the launches it made together) ends in that abort."""
    done = launch()
    for _ in range(LAUNCHES - 1):
        if not any(d.returncode != 0 and aborted_at_exit((d.stdout or "") + (d.stderr or "")) for d in _each(done)):
            break
        done = launch()
    return done


def _each(done: Launched) -> Sequence[subprocess.CompletedProcess[str]]:
    return [done] if isinstance(done, subprocess.CompletedProcess) else done
