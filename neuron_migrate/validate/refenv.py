"""The reference environment: the old stack (torch 2.9 + torch_xla 2.9) in a virtualenv of its own.

The old and the new stack cannot share one interpreter, exactly as on a real Trainium host, so
`validate` runs the original program with this environment's Python. `neuron-migrate env
reference DIR` builds it once; later calls find it complete and return at once.
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
# their data through it, and several log through torch.utils.tensorboard.
PINS = (
    "torch==2.9.0",
    "torch-xla==2.9.0",
    "torchvision==0.24.0",
    "transformers~=4.57.1",
    "safetensors",
    "numpy",
    "tensorboard",
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
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RefEnvError(f"{python}: the old stack does not import or run:\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _stamp_ok(root: Path) -> dict[str, str] | None:
    try:
        stamp = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp["versions"] if stamp.get("pins") == list(PINS) else None


def ensure(root: Path, base_python: str | None = None, log=print) -> RefEnv:
    """Build the reference env at `root` unless a complete one is already there."""
    root = root.expanduser().absolute()
    versions = _stamp_ok(root)
    if versions is not None and python_in(root).exists():
        log(
            f"reference env {root}: present (torch {versions['torch']}, torch_xla {versions['torch_xla']})"
        )
        return RefEnv(root, versions)
    if not python_in(root).exists():
        log(f"creating virtualenv {root}")
        if base_python:
            _run([base_python, "-m", "venv", str(root)])
        else:
            venv.EnvBuilder(with_pip=True, clear=False).create(root)
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


def _run(cmd: list[str]) -> None:
    # pip's own output goes straight to the terminal: it is the progress a user waits on.
    done = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0:
        raise RefEnvError(f"command failed (exit {done.returncode}): {' '.join(cmd)}")
