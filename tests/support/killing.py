"""A writer killed partway (issue 46): `WriterSpec`, what a writer run as a child process writes (the test kills it
with SIGKILL partway through `xarray_zarrmax.to_zarr`), and what a process has under way as /proc shows it: files
held open for writing (`writing_into`), request bodies being sent (`sending_to`).

The writer child is ``python -m tests.support.killing SPEC`` (SPEC: the JSON of `WriterSpec`): it prints
``ready`` once imported, waits for a line on stdin, then writes the new values of `new_values` over the region.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class WriterSpec:
    """What the writer child writes: ``v`` of ``shape`` in ``chunks`` and ``shards`` along the first dimension
    ``t``, every value of the region ``start:stop`` replaced by `new_values`, with ``settings`` for
    `xarray_zarrmax.set_config` and the ``scheduler`` of dask's compute. ``write_delay``: each local file is
    written half, then after this many seconds the rest (a slow disk: a kill lands while a file is half written).
    """

    target: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    shards: tuple[int, ...]
    start: int
    stop: int
    storage_options: dict[str, Any] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    scheduler: str = "threads"
    write_delay: float = 0.0

    def old_values(self) -> np.ndarray:
        return np.random.default_rng(46).normal(size=self.shape).astype("f4")

    def new_values(self) -> np.ndarray:
        """The whole array after a complete write: the region's values all changed, the rest kept."""
        values = self.old_values()
        values[self.start:self.stop] += 1000  # never equal to an old value
        return values

    def shard_slices(self) -> list[slice]:
        return [slice(s, min(s + self.shards[0], self.shape[0])) for s in range(0, self.shape[0], self.shards[0])]

    def write_old(self) -> None:
        """The store as it was before the killed write (mode "w": anything a previous trial left is gone)."""
        import dask
        import xarray as xr

        import xarray_zarrmax

        ds = xr.Dataset({"v": (("t", "y", "x"), self.old_values())})
        encoding = {"v": {"chunks": self.chunks, "shards": self.shards, "compressors": None}}
        with dask.config.set(scheduler="threads"):
            xarray_zarrmax.to_zarr(ds, self.target, mode="w", encoding=encoding,
                                   storage_options=self.storage_options)

    def write_new(self, storage_options: dict[str, Any] | None = None) -> None:
        """The write the test kills: the region's new values, a dask block per shard (edges: partial shards,
        read, merged and written back conditionally)."""
        import dask
        import xarray as xr

        import xarray_zarrmax

        part = self.new_values()[self.start:self.stop]
        ds = xr.Dataset({"v": (("t", "y", "x"), part)})
        first = self.shards[0] - self.start % self.shards[0]  # up to the first shard boundary, then shard by shard
        blocks = [first, *[self.shards[0]] * ((len(part) - first) // self.shards[0])]
        if sum(blocks) < len(part):
            blocks.append(len(part) - sum(blocks))
        ds = ds.chunk({"t": tuple(blocks)})
        with dask.config.set(scheduler=self.scheduler), xarray_zarrmax.set_config(**self.settings):
            xarray_zarrmax.to_zarr(ds, self.target, region={"t": slice(self.start, self.stop)},
                                   storage_options=storage_options or self.storage_options)

    def command(self, storage_options: dict[str, Any] | None = None) -> list[str]:
        """The child's command line, writing through ``storage_options`` (a slowed proxy) if given."""
        spec = {**asdict(self), "storage_options": storage_options or self.storage_options}
        return [sys.executable, "-m", "tests.support.killing", json.dumps(spec)]


def writing_into(pid: int, folder: str | Path) -> list[str]:
    """The files under ``folder`` that process ``pid`` holds open for writing, as /proc names them (a file with
    no name yet as ``#INODE (deleted)``, a temporary name as itself, an object written in place as its key): a
    write in progress (Linux)."""
    prefix = str(folder).rstrip("/") + "/"
    held = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:  # exited
        return []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if not target.startswith(prefix):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags:"))
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
        if flags & (os.O_WRONLY | os.O_RDWR):  # not the directories held for their locks
            held.append(target[len(prefix):])
    return held


def sending_to(pid: int, port: int) -> list[str]:
    """The TCP connections of process ``pid`` to ``port`` on loopback with bytes not yet taken by the other end
    (its send queue, /proc/net/tcp's ``tx_queue``): a request body being sent (Linux)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:  # exited
        return []
    sockets = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if target.startswith("socket:["):
            sockets.add(target[len("socket:["):-1])
    found = []
    try:
        with open(f"/proc/{pid}/net/tcp") as f:
            lines = f.read().splitlines()[1:]
    except FileNotFoundError:
        return []
    for line in lines:
        fields = line.split()
        remote_port, queued = int(fields[2].split(":")[1], 16), int(fields[4].split(":")[0], 16)
        if fields[9] in sockets and remote_port == port and queued:
            found.append(f"{queued} bytes queued to port {port}")
    return found


def _slow_local_writes(delay: float) -> None:
    """Every local file the writer writes gets half its bytes, then after ``delay`` seconds the rest."""
    from xarray_zarrmax.core.bytes import parts_of
    from xarray_zarrmax.storage import local

    def write_all(fd: int, view: memoryview) -> None:
        while view:
            view = view[os.write(fd, view):]

    def slow_write_parts(fd: int, data: Any) -> None:
        blob = memoryview(b"".join(parts_of(data)))
        write_all(fd, blob[:len(blob) // 2])
        time.sleep(delay)
        write_all(fd, blob[len(blob) // 2:])

    local._write_parts = slow_write_parts


def _child(spec_json: str) -> None:
    raw = json.loads(spec_json)
    spec = WriterSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
    import xarray_zarrmax  # noqa: F401  (imports paid before "ready")

    if spec.write_delay:
        _slow_local_writes(spec.write_delay)
    print("ready", flush=True)
    sys.stdin.readline()
    spec.write_new()
    print("done", flush=True)


if __name__ == "__main__":
    _child(sys.argv[1])
