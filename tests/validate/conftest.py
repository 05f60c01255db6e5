"""Shared pieces of the validate tests: the reference env, the migrated examples, the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.validate import refenv
from neuron_migrate.validate.command import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PROGRAMS = Path(__file__).parent / "programs"

# torch_xla on a CPU host; set before any program is started (they inherit the environment).
os.environ.setdefault("PJRT_DEVICE", "CPU")


@pytest.fixture(scope="session")
def reference_python() -> Path:
    python = refenv.default_python()
    if python is None or not python.exists():
        pytest.skip(
            "no reference environment (torch 2.9 + torch_xla 2.9): build it with "
            f"`neuron-migrate env reference` (default {refenv.DEFAULT_DIR}) or set {refenv.ENV_VAR}"
        )
    return python


@pytest.fixture(scope="session")
def migrated_examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every example migrated by the rewrite engine (portable target), as the CLI would write it."""
    out = tmp_path_factory.mktemp("migrated")
    for path in sorted(EXAMPLES.glob("*.py")):
        result = rewrite_source(path.read_text(), str(path), Options())
        assert not result.error, result.error
        (out / path.name).write_text(result.migrated)
    return out


def plant(source: Path, destination: Path, old: str, new: str) -> Path:
    """A copy of `source` with one wrong migration planted in it."""
    text = source.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {source}"
    destination.write_text(text.replace(old, new))
    return destination


def validate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    """Runs `validate ... --json` through the CLI entry point; returns the exit code and the JSON."""
    code = main(["validate", "--json=-", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out)


def items_by_key(document: dict) -> dict[str, dict]:
    return {item["key"]: item for item in document.get("items", [])}
