"""The kernel's end of the channel to the browser tab that shows this notebook.

neuron-migrate's JupyterLab piece (`labextension/`, installed with the package) answers on a comm
named `neuron_migrate`. Through it the tab says which notebook it shows (also after a rename) and
whether it has unsaved changes, and the kernel asks it to edit a notebook or a file that is open
in this window: the tab changes its own document (so its undo works and no later save brings
the old text back) and saves it through Jupyter's contents API. The tab also keeps the static
views of the widgets up to date in the notebook it saves (see `static_views`).

Where no tab answers (VS Code, nbclient and papermill, a browser without the piece), `current()`
is None and callers write files themselves.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TARGET = "neuron_migrate"
EXTENSION = "neuron-migrate"  # the JupyterLab extension's name, its folder in labextensions/
PROTOCOL = 1
REPLY_TIMEOUT = 10.0  # seconds a tab has to answer an edit before it is taken to be gone

Reply = dict[str, Any]


@dataclass
class Edit:
    """What to change in one file: the sources of notebook cells (by index), or a file's text.
    Each carries what the kernel believes is there now, so that a tab whose copy differs (edited
    since, unsaved) refuses instead of overwriting."""

    path: Path
    cells: list[tuple[int, str, str]] = field(default_factory=list)  # (index, old, new)
    text: tuple[str, str] | None = None  # (old, new) for a file that is not a notebook
    undoing: bool = False  # takes back an edit: a refusal says what was not restored

    def undo(self) -> Edit:
        return Edit(
            self.path,
            [(index, new, old) for index, old, new in self.cells],
            None if self.text is None else (self.text[1], self.text[0]),
            not self.undoing,
        )


class Bridge:
    """The comms with the tabs of this kernel's notebook (usually one)."""

    def __init__(self) -> None:
        self.comms: list[Any] = []
        self.root: Path | None = None  # the Jupyter server's root folder, as the tab says
        self.relative: str | None = None  # the notebook's path under it
        self.dirty: bool | None = None  # whether the tab has unsaved changes
        self._requests = itertools.count(1)
        self._waiting: dict[int, Callable[[Reply], None]] = {}

    @property
    def connected(self) -> bool:
        """Whether a tab has answered."""
        return self.root is not None and bool(self.comms)

    @property
    def notebook(self) -> Path | None:
        if self.root is None or self.relative is None:
            return None
        return self.root / self.relative

    # -- the comm ---------------------------------------------------------------------------------

    def open(self) -> None:
        """Say hello to the tabs: those with the JupyterLab piece answer on this comm (also after
        a reload of the page, which finds the comm open); the others close it."""
        import comm

        channel = comm.create_comm(target_name=TARGET, data={"hello": PROTOCOL})
        channel.on_msg(lambda message: self.receive(message["content"]["data"]))
        channel.on_close(lambda _message: self._closed(channel))
        self.comms.append(channel)

    def _closed(self, channel: Any) -> None:
        if channel in self.comms:
            self.comms.remove(channel)

    def receive(self, data: Reply) -> None:
        """A message from a tab: an event, or the answer to a request."""
        event = data.get("event")
        if event in ("hello", "path"):
            root = data.get("root")
            if isinstance(root, str) and root:
                self.root = Path(root).expanduser()
            if isinstance(data.get("path"), str):
                self.relative = data["path"]
        if event in ("hello", "dirty") and isinstance(data.get("dirty"), bool):
            self.dirty = data["dirty"]
        callback = self._waiting.pop(data.get("reply", -1), None)
        if callback is not None:
            callback(data)

    def _send(self, data: Reply) -> None:
        for channel in list(self.comms):
            channel.send(data)

    # -- requests ---------------------------------------------------------------------------------

    def relative_to_root(self, path: Path) -> str | None:
        """`path` as the tab names it (relative to the server's root, `/`-separated); None
        outside the root."""
        if self.root is None:
            return None
        relative = os.path.relpath(Path(path).resolve(), self.root.resolve())
        return None if relative.startswith("..") else relative.replace(os.sep, "/")

    def edit(self, change: Edit, answer: Callable[[Reply], None]) -> bool:
        """Ask the tabs to make `change` in the document they have open and save it; `answer`
        gets `{"done": bool, "open": bool, "error": str?}` (`open` false: no tab has the file
        open). False, with nothing sent, when no tab is connected or the file is outside the
        server's root."""
        relative = self.relative_to_root(change.path) if self.connected else None
        if relative is None:
            return False
        number = next(self._requests)
        self._waiting[number] = answer
        request: Reply = {"request": number, "op": "edit", "path": relative}
        if change.undoing:
            request["undo"] = True
        if change.text is not None:
            request["text"] = {"old": change.text[0], "new": change.text[1]}
        else:
            request["cells"] = [
                {"index": i, "old": old, "new": new} for i, old, new in change.cells
            ]
        self._send(request)
        self._expire(number)
        return True

    def _expire(self, number: int) -> None:
        """Give up on a request no tab answered (the tab was closed): answer it as not done."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (a plain IPython shell): nothing would answer anyway

        def expired() -> None:
            callback = self._waiting.pop(number, None)
            if callback is not None:
                self.root = None  # the tab is gone, until one says hello again
                callback({"done": False, "open": False, "error": "the tab did not answer"})

        loop.call_later(REPLY_TIMEOUT, expired)

    def static_view(self, model_id: str, bundle: dict[str, Any], now: bool = False) -> None:
        """The static representation of a widget changed: the tabs put it in the notebook
        they save, next to the widget's view (see neuron_migrate.jupyter.views); with `now`,
        into the notebook at once (a result that the next save must hold), else when they save."""
        if self.connected:
            message: Reply = {"op": "static", "model_id": model_id, "data": bundle}
            if now:
                message["now"] = True
            self._send(message)


def extension_missing(shell: Any) -> bool:
    """Whether `shell` runs in a Jupyter kernel, whose tabs would need the JupyterLab extension,
    and the extension is not installed."""
    return getattr(shell, "kernel", None) is not None and not extension_installed()


def extension_installed() -> bool:
    """Whether the JupyterLab extension is installed where JupyterLab looks for it (what
    `jupyter labextension list` lists), as this kernel's environment sees it."""
    try:
        from jupyter_core.paths import jupyter_path
    except ImportError:  # no Jupyter here: no tab either
        return False
    return any(
        (Path(folder) / EXTENSION / "package.json").is_file()
        for folder in jupyter_path("labextensions")
    )


EXTENSION_MISSING = (
    "the JupyterLab extension is not installed (reinstall: `pip install neuron-migrate`, or "
    "`pip install -e .` in a checkout, then reload the page): a tab showing a file the app writes "
    "keeps the old code (saving it would undo the write), and %%neuron_migrate's Replace cell / "
    "Insert below buttons are hidden"
)


_BRIDGE: Bridge | None = None  # one per kernel process


def start() -> Bridge:
    """Called by `%load_ext`: greet the tabs of this kernel, unless one has answered already."""
    global _BRIDGE
    if _BRIDGE is None:
        _BRIDGE = Bridge()
    if not _BRIDGE.connected:
        _BRIDGE.open()
    return _BRIDGE


def current() -> Bridge | None:
    """The bridge, when a tab has answered."""
    return _BRIDGE if _BRIDGE is not None and _BRIDGE.connected else None
