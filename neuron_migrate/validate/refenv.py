"""The reference environment: the old stack (torch 2.9 + torch_xla 2.9) in a virtualenv of its own.

The old and the new stack cannot share one interpreter, exactly as on a real Trainium host, so
`validate` runs the original program with this environment's Python. `neuron-migrate env
reference DIR` builds it once; later calls find it complete and working and return, or repair it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

# torch_xla 2.9 is the last release that runs the lazy-tensor scripts on CPU; the transformers
# pin is the one optimum-neuron 0.4.5 declares (`transformers~=4.57.1`). torchvision 0.24.0 is
# the release built against torch 2.9.0 (another would replace torch); the vision samples load
# their data through it, and several log through torch.utils.tensorboard. ipykernel lets a
# notebook's original run in a Jupyter kernel of this environment, to make its saved outputs.
PINS = (
    "torch==2.9.0",
    "torch-xla==2.9.0",
    "torchvision==0.24.0",
    "transformers~=4.57.1",
    "safetensors",
    "numpy",
    "tensorboard",
    "ipykernel",
)
STAMP = "neuron-migrate-refenv.json"
ENV_VAR = "NEURON_MIGRATE_REFERENCE_PYTHON"
DEFAULT_DIR = Path.home() / ".cache" / "neuron-migrate" / "refenv"

# Run inside the reference env: imports the stack and runs one lazy-tensor op on XLA:CPU.
_PROBE = """
import json, torch, torch_xla, torch_xla.core.xla_model as xm, transformers, safetensors
import torchvision, torch.utils.tensorboard
t = torch.ones(2, device=torch_xla.device()) * 2
assert t.cpu().tolist() == [2.0, 2.0]
print(json.dumps({"torch": torch.__version__, "torch_xla": torch_xla.__version__,
                  "torchvision": torchvision.__version__,
                  "transformers": transformers.__version__, "safetensors": safetensors.__version__}))
"""


class RefEnvError(RuntimeError):
    """The reference environment could not be built or does not work."""


@dataclass(frozen=True)
class RefEnv:
    root: Path
    versions: dict[str, str]

    @property
    def python(self) -> Path:
        return python_in(self.root)


def python_in(root: Path) -> Path:
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def default_python() -> Path | None:
    """The reference Python: $NEURON_MIGRATE_REFERENCE_PYTHON, else the default cache dir."""
    given = os.environ.get(ENV_VAR)
    if given:
        return Path(given)
    candidate = python_in(DEFAULT_DIR)
    return candidate if candidate.exists() else None


def probe(python: Path, timeout: float = 300) -> dict[str, str]:
    """Versions of the old stack in `python`'s environment; raises RefEnvError if it does not work."""
    env = dict(os.environ, PJRT_DEVICE="CPU")
    try:
        done = subprocess.run(
            [str(python), "-c", _PROBE], capture_output=True, text=True, env=env, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RefEnvError(f"{python}: cannot run: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:]) or f"exit status {done.returncode}"
        raise RefEnvError(f"{python}: the old stack does not import or run:\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _reason(error: RefEnvError) -> str:
    """The last line of why an environment does not work (the exception its Python raised)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else "it does not work"


def check(python: str | Path | None = None, timeout: float = 300) -> tuple[Path | None, str]:
    """The reference Python to run an original program with, and one line that says which; or
    None, and one line that says why there is none and what to do. `python` if given, else
    `default_python()`; it has to run the old stack (see `probe`), not only exist."""
    chosen = Path(python) if python else default_python()
    build = "build one with `neuron-migrate env reference`"
    if chosen is None:
        return None, (
            f"no reference environment (torch 2.9 + torch_xla 2.9) in {DEFAULT_DIR} and "
            f"${ENV_VAR} is not set: {build}"
        )
    if not chosen.exists():
        return None, (
            f"the reference Python {chosen} does not exist: {build}, or set ${ENV_VAR} to the "
            "Python of one"
        )
    try:
        versions = probe(chosen, timeout)
    except RefEnvError as exc:
        root = chosen.parent.parent
        repair = (
            f"`neuron-migrate env reference {root}` repairs it"
            # one `env reference` built (never a virtualenv of other things: it would get torch 2.9)
            if python_in(root) == chosen and ((root / STAMP).exists() or root == DEFAULT_DIR)
            else f"repair it, or set ${ENV_VAR} to the Python of a working one ({build})"
        )
        reason = _reason(exc).removeprefix(f"{chosen}: ")
        return None, f"the reference environment {chosen} does not work ({reason}): {repair}"
    stack = ", ".join(
        f"{name} {versions[name]}" for name in ("torch", "torch_xla") if name in versions
    )
    return chosen, f"reference environment: {chosen} ({stack})"


def _stamp_ok(root: Path) -> dict[str, str] | None:
    try:
        stamp = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp["versions"] if stamp.get("pins") == list(PINS) else None


def ensure(root: Path, base_python: str | None = None, log=print) -> RefEnv:
    """Build the reference env at `root` unless a complete one whose old stack runs is there
    already; one that no longer runs is repaired (installed again, its virtualenv made again
    where its Python cannot start)."""
    root = root.expanduser().absolute()
    if _stamp_ok(root) is not None and python_in(root).exists():
        try:
            versions = probe(python_in(root))
        except RefEnvError as exc:
            log(
                f"reference env {root}: present, but it does not work ({_reason(exc)}); repairing it"
            )
        else:
            log(
                f"reference env {root}: present (torch {versions['torch']}, torch_xla {versions['torch_xla']})"
            )
            return RefEnv(root, versions)
    if not _runs(python_in(root)):
        # A virtualenv whose Python cannot start (its base interpreter is gone) is made again.
        clear = (root / "pyvenv.cfg").exists()
        log(f"{'recreating' if clear else 'creating'} virtualenv {root}")
        if base_python:
            _run([base_python, "-m", "venv", *(["--clear"] if clear else []), str(root)])
        else:
            venv.EnvBuilder(with_pip=True, clear=clear).create(root)
    python = str(python_in(root))
    log(f"installing {' '.join(PINS)} (torch 2.9 is a large download the first time)")
    _run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *PINS])
    versions = probe(python_in(root))
    (root / STAMP).write_text(
        json.dumps({"pins": list(PINS), "versions": versions}, indent=1) + "\n"
    )
    log(
        f"reference env {root}: ready (torch {versions['torch']}, torch_xla {versions['torch_xla']})"
    )
    return RefEnv(root, versions)


def _runs(python: Path) -> bool:
    """Whether `python` starts at all."""
    try:
        return (
            subprocess.run([str(python), "-c", "pass"], capture_output=True, timeout=60).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _run(cmd: list[str]) -> None:
    # pip's own output goes straight to the terminal: it is the progress a user waits on.
    done = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0:
        raise RefEnvError(f"command failed (exit {done.returncode}): {' '.join(cmd)}")
