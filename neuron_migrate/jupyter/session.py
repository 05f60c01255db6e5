"""This kernel's notebook: which file it is, and the cells the kernel ran.

A kernel is not told which notebook it serves, and `__session__` keeps the name the notebook had
when the kernel started (JupyterLab renames `Untitled.ipynb` on its first save). So the path is
asked, in order, from the notebook's open tab (the JupyterLab piece, see `bridge`), from the
Jupyter server that started this kernel (its sessions, matched by this kernel's id), from VS
Code's `__vsc_ipynb_file__`, and last from `__session__`.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuron_migrate.jupyter import bridge

SERVER_TIMEOUT = 2.0  # seconds to wait for the Jupyter server's answer


@dataclass(frozen=True)
class Cell:
    label: str  # "cell 4" (in the notebook file) or "In [7]" (as this kernel ran it)
    source: str


@dataclass(frozen=True)
class Located:
    path: Path
    how: str  # who named it, for messages: "the open tab", "the Jupyter server", ...


def kernel_id() -> str | None:
    """This kernel's id, from the name of its connection file (`kernel-<id>.json`)."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except (ImportError, RuntimeError, AttributeError):
        return None
    match = re.fullmatch(r"kernel-(.+)\.json", name)
    return match.group(1) if match else None


def running_servers() -> list[dict[str, Any]]:
    """The Jupyter servers of this user that are running (what `jupyter server list` reads)."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:
        return []
    servers = []
    for info in sorted(Path(jupyter_runtime_dir()).glob("jpserver-*.json")):
        try:
            server = json.loads(info.read_text(encoding="utf-8"))
            os.kill(int(server["pid"]), 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable, or its process is gone
        servers.append(server)
    return servers


def server_request(server: dict[str, Any], path: str) -> Any:
    """GET `path` of a server's REST API, with its token; raises OSError or ValueError."""
    request = urllib.request.Request(
        server["url"].rstrip("/") + "/" + path.lstrip("/"),
        headers={"Authorization": f"token {server.get('token', '')}"},
    )
    with urllib.request.urlopen(request, timeout=SERVER_TIMEOUT) as response:
        return json.loads(response.read().decode("utf-8"))


def path_from_server(kernel: str | None = None) -> Path | None:
    """The notebook of this kernel's session on the Jupyter server that runs it."""
    kernel = kernel or kernel_id()
    if kernel is None:
        return None
    for server in running_servers():
        try:
            sessions = server_request(server, "api/sessions")
        except (OSError, ValueError):
            continue
        for session in sessions if isinstance(sessions, list) else []:
            if (session.get("kernel") or {}).get("id") == kernel and session.get("path"):
                return Path(server.get("root_dir", ".")).expanduser() / session["path"]
    return None


def notebook_path(user_ns: dict[str, Any]) -> Located | None:
    """The file of the notebook this kernel serves, when someone says which (see the module)."""
    tab = bridge.current()
    if tab is not None and tab.notebook is not None and tab.notebook.is_file():
        return Located(tab.notebook, "the open tab")
    served = path_from_server()
    if served is not None and served.suffix == ".ipynb" and served.is_file():
        return Located(served, "the Jupyter server")
    for value, how in (
        (user_ns.get("__vsc_ipynb_file__"), "VS Code"),
        (user_ns.get("__session__"), "the kernel's session"),
        (os.environ.get("JPY_SESSION_NAME"), "the kernel's session"),
    ):
        if isinstance(value, str) and value.endswith(".ipynb") and Path(value).is_file():
            return Located(Path(value), how)
    return None


def ran_cells(shell: Any, before: int | None = None) -> list[Cell]:
    """The cells this kernel ran (`In [N]`), in order, up to but not including `In [before]`;
    a cell run again with the same source counts once, where it ran last."""
    history = shell.history_manager.input_hist_raw
    end = len(history) if before is None else min(before, len(history))
    last = {history[number]: number for number in range(1, end) if history[number].strip()}
    return [
        Cell(f"In [{number}]", source)
        for source, number in sorted(last.items(), key=lambda item: item[1])
    ]
