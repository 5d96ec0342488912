"""Reads on dask workers, marked (issue 46): `ReadMarkers`, a worker plugin that leaves a file when a read starts
and another when it ends (and slows local reads down, so that a kill lands in one), and what the marks say of a
process (`reads_in_flight`, `reads_done`)."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


class ReadMarkers(WorkerPlugin):
    """A dask.distributed worker plugin (`Client.register_plugin`; workers started later run it too): each read
    of a lazy array (`xarray_zarrmax.backend.arrays.read_selection`) leaves ``start-PID-N`` in ``folder``,
    holding the store and the selection, when it begins and ``end-PID-N`` when it returns; every local object
    opened for data waits ``local_delay`` seconds once open (a slow disk), so a read lasts long enough to be
    killed in."""

    name = "zarrmax-read-markers"

    def __init__(self, folder: str, local_delay: float) -> None:
        self.folder = folder
        self.local_delay = local_delay

    def setup(self, worker: Any = None) -> None:
        from xarray_zarrmax.backend import arrays
        from xarray_zarrmax.storage import local

        if getattr(arrays.read_selection, "marked", False):
            return
        folder, delay, numbers = Path(self.folder), self.local_delay, itertools.count()
        read_selection, open_object = arrays.read_selection, local.LocalSource._open

        def marked(plan: Any, source: Any, axes: Any, token: str, *args: Any, **kwargs: Any) -> Any:
            tag = f"{os.getpid()}-{next(numbers)}"
            # whole or not there: a worker killed between creating the file and writing it left an empty start
            # mark, a read of no selection that no other worker could be seen to do again (a CI run failed so)
            writing = folder / f"writing-{tag}"
            writing.write_text(f"{source.label} {axes!r}")
            os.replace(writing, folder / f"start-{tag}")
            out = read_selection(plan, source, axes, token, *args, **kwargs)
            (folder / f"end-{tag}").touch()
            return out

        def slow_open(self: Any, key: str) -> Any:
            opened = open_object(self, key)
            if opened is not None and "/c/" in key:
                time.sleep(delay)
            return opened

        marked.marked = True  # type: ignore[attr-defined]
        arrays.read_selection = marked
        local.LocalSource._open = slow_open



def reads_in_flight(folder: str | Path, pid: int) -> list[str]:
    """The selections of reads that process ``pid`` started and never finished."""
    folder = Path(folder)
    return [p.read_text() for p in folder.glob(f"start-{pid}-*")
            if not (folder / p.name.replace("start-", "end-", 1)).exists()]


def reads_done(folder: str | Path, selection: str, *, not_by: int) -> int:
    """How many reads of ``selection`` by processes other than ``not_by`` finished."""
    folder = Path(folder)
    done = 0
    for p in folder.glob("start-*"):
        if p.name.startswith(f"start-{not_by}-"):
            continue
        if (folder / p.name.replace("start-", "end-", 1)).exists() and p.read_text() == selection:
            done += 1
    return done
