"""The JupyterLab extension is there after the install users do: the wheel (`pip install
neuron-migrate`) and an editable install of a checkout (`pip install -e .`) put it where
JupyterLab finds installed extensions, `jupyter labextension list` shows it enabled and OK, and
JupyterLab run from that environment hands it to the page (see `installs` for how each install
is made).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.jupyter.conftest import ROOT
from tests.jupyter.installs import checkout_copy, environment, listed, run, wheel_environment

pytestmark = pytest.mark.slow

pytest.importorskip("jupyterlab", reason="JupyterLab is not installed")


@contextlib.contextmanager
def _jupyterlab(python: Path, root: Path) -> Iterator[Callable[[str], bytes]]:
    """JupyterLab on 127.0.0.1, run by `python`, over an empty folder: a function that GETs a
    page of it."""
    root.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON"))}
    env.update(JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_RUNTIME_DIR=str(root / "runtime"))
    log = (root.parent / "jupyterlab.log").open("w")
    server = subprocess.Popen(
        [
            str(python),
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.extension_manager=readonly",
            *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def get(path: str) -> bytes:
        url = f"http://127.0.0.1:{port}{path}?token={token}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return bytes(response.read())

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                get("/api/status")
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    root.parent / "jupyterlab.log"
                ).read_text()[-3000:]
                time.sleep(0.3)
        yield get
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _imported_from(python: Path) -> str:
    return run(python, "-c", "import neuron_migrate; print(neuron_migrate.__file__)").strip()


def test_the_wheel_installs_the_jupyterlab_extension(tmp_path: Path) -> None:
    python = wheel_environment(tmp_path)
    assert _imported_from(python).startswith(str(tmp_path / "venv"))
    line = listed(python, tmp_path / "venv")
    assert re.fullmatch(r"neuron-migrate v\S+ enabled OK \(python, neuron-migrate\)", line), line
    installed = tmp_path / "venv" / "share" / "jupyter" / "labextensions" / "neuron-migrate"
    shipped = ROOT / "neuron_migrate" / "jupyter" / "labextension" / "static" / "remoteEntry.js"
    assert (installed / "static" / "remoteEntry.js").read_bytes() == shipped.read_bytes()
    # The kernel side agrees: %load_ext and the app find it, and say nothing of it.
    found = run(
        python,
        "-c",
        "from neuron_migrate.jupyter import bridge; print(bridge.extension_installed())",
    )
    assert found.strip() == "True"
    # JupyterLab, started from that environment, hands the extension to the page.
    with _jupyterlab(python, tmp_path / "lab") as get:
        config = re.search(
            r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
            get("/lab").decode(),
            re.DOTALL,
        )
        assert config, "no page config"
        [extension] = [
            e
            for e in json.loads(config.group(1))["federated_extensions"]
            if e["name"] == "neuron-migrate"
        ]
        assert extension["load"] == "static/remoteEntry.js"
        served = get("/lab/extensions/neuron-migrate/static/remoteEntry.js")
        assert served == shipped.read_bytes()


def test_an_editable_install_installs_the_jupyterlab_extension(tmp_path: Path) -> None:
    checkout = checkout_copy(tmp_path / "checkout")
    python = environment(tmp_path / "venv")
    run(python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", checkout)
    assert _imported_from(python).startswith(str(checkout))
    line = listed(python, tmp_path / "venv")
    assert re.fullmatch(r"neuron-migrate v\S+ enabled OK \(python, neuron-migrate\)", line), line
