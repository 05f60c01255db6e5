"""A fresh copy of a program's working folder for each run after the first (the noise floor, reruns).

The first run of the original writes its outputs where it runs (checkpoints, logs, `out/`); run
again there, a program that guards its outputs stops (`input("overwrite?")`, or exits when they
exist) or reads its own earlier results back. So the folder's files are listed before any run, and
each later run starts in a copy of that listing: what a run wrote is left out, what was there
before is copied (files from `LINK_ABOVE` bytes up are linked, not copied: data sets, weights).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from neuron_migrate.validate.runner import Program

LINK_ABOVE = 16 * 2**20
# A working folder with more entries than this (validate started from a home folder, a data
# root) is not copied: the later runs share it, and the result says so.
MAX_ENTRIES = 20_000


@dataclass
class Listing:
    """The files and folders under `root` before any run (relative paths), or why there are none."""

    root: Path
    files: set[str]
    folders: set[str]
    too_big: bool = False


def listing(root: Path, skip: Path) -> Listing:
    """What `root` holds now, less `skip` (validate's own work folder, where it lies inside)."""
    root, skip = root.resolve(), skip.resolve()
    files: set[str] = set()
    folders: set[str] = set()
    for current, dirs, names in os.walk(root):
        here = Path(current)
        dirs[:] = [d for d in dirs if (here / d).resolve() != skip]
        links = [d for d in dirs if (here / d).is_symlink()]  # not walked: listed as links
        dirs[:] = [d for d in dirs if d not in links]
        names = [*names, *links]
        for d in dirs:
            folders.add(str((here / d).relative_to(root)))
        for name in names:
            files.add(str((here / name).relative_to(root)))
        if len(files) + len(folders) > MAX_ENTRIES:
            return Listing(root, set(), set(), too_big=True)
    return Listing(root, files, folders)


def copy_of(listing: Listing, destination: Path) -> None:
    """`destination` with the listed folders and files, as they are now."""
    for folder in sorted(listing.folders):
        (destination / folder).mkdir(parents=True, exist_ok=True)
    destination.mkdir(parents=True, exist_ok=True)
    for name in sorted(listing.files):
        source, target = listing.root / name, destination / name
        if source.is_symlink():
            target.symlink_to(source.resolve())  # a relative link would point elsewhere from here
        elif not source.is_file():
            continue  # gone since, or a socket or pipe
        elif source.stat().st_size >= LINK_ABOVE:
            target.symlink_to(source)
        else:
            shutil.copy2(source, target)


def isolated(
    program: Program, listings: dict[Path, Listing], destination: Path
) -> tuple[Program, str | None]:
    """`program` started in a fresh copy of its working folder, under `destination`; the script
    runs from the copy where it lies inside the folder (outputs placed beside `__file__` go there
    too). The other entries of the folder above are linked beside the copy, so that what the
    program finds through `..` (`sys.path.append('..')`, `../data`) it finds from the copy too.
    With no listing to copy, the program itself and the reason it shares its folder."""
    cwd = (program.cwd or Path.cwd()).resolve()
    found = listings.get(cwd)
    if found is None or found.too_big:
        why = f"more than {MAX_ENTRIES} files and folders" if found else "no listing of it"
        return program, f"the {program.label} run shares the working folder {cwd} ({why})"
    if destination.exists():
        shutil.rmtree(destination)
    home = destination / (cwd.name or "root")
    copy_of(found, home)
    _link_siblings(cwd, destination)
    script = program.script.absolute()
    inside = _relative(script.resolve(), cwd)
    if inside is not None and inside in found.files:
        script = home / inside
    python = program.python
    if python.parent != Path() or python.exists():  # a path, not a name to find on PATH
        python = python.absolute()
    return dataclasses.replace(program, script=script, python=python, cwd=home), None


def _link_siblings(cwd: Path, destination: Path) -> None:
    """Links in `destination` to what lies beside `cwd`, less `cwd` itself and what holds
    `destination` (validate's own work folder: a link to it would loop)."""
    parent = cwd.parent
    if parent == cwd:
        return
    inside = destination.resolve()
    for entry in parent.iterdir():
        if entry.name == cwd.name or _relative(inside, entry.resolve()) is not None:
            continue
        target = destination / entry.name
        if not target.exists() and not target.is_symlink():
            target.symlink_to(entry.resolve())


def _relative(path: Path, root: Path) -> str | None:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return None
