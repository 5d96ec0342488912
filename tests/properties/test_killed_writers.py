"""Writers that die (issue 46): a writer SIGKILLed partway through `xarray_zarrmax.to_zarr` (while it writes a file,
sends a PUT's body or a multipart upload's part) leaves every shard whole, either as it was or as the write would
have left it, and a store engine="zarr" and engine="zarrmax" read alike, on local disk and MinIO."""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.support.compare import s3_oracle
from tests.support.killing import WriterSpec, sending_to, writing_into
from tests.support.targets import counter
from xarray_zarrmax.testing import MinioServer, Toxiproxy

ROOT = Path(__file__).resolve().parents[2]
_proxies = itertools.count()

pytestmark = pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="reads what a writer does in /proc")



def _shard_states(spec: WriterSpec, store: Any) -> list[str]:
    """Each shard "old", "new" or what else it is: every chunk is decoded (by zarr-python) and compared with the
    old values and those a complete write leaves; a shard must be wholly one or the other."""
    arr = zarr.open_array(store, path="v", mode="r")
    old, new = spec.old_values(), spec.new_values()
    states = []
    for shard in spec.shard_slices():
        try:
            got = arr[shard]
        except Exception as err:  # a torn shard: its index or chunks do not decode
            states.append(f"unreadable ({type(err).__name__}: {err})")
            continue
        if np.array_equal(got, old[shard]):
            states.append("old")
        elif np.array_equal(got, new[shard]):
            states.append("new")
        else:
            chunks = [("old" if np.array_equal(got[c:c + spec.chunks[0]], old[shard][c:c + spec.chunks[0]])
                       else "new" if np.array_equal(got[c:c + spec.chunks[0]], new[shard][c:c + spec.chunks[0]])
                       else "neither") for c in range(0, len(got), spec.chunks[0])]
            states.append(f"torn: chunks {chunks}")
    return states


def _kill_writer(spec: WriterSpec, changed: Callable[[], int], at_least: int, in_flight: Callable[[int], list[str]],
                 storage_options: dict[str, Any] | None = None) -> list[str]:
    """Start the writer child; once ``changed()`` counts ``at_least`` shards rewritten, SIGKILL it while
    ``in_flight(pid)`` names a write under way (a file held open for writing, a request body being sent): it is
    stopped (SIGSTOP) when one is seen and killed if one is still under way, else let go on. Returns what was
    under way when it was killed (nothing: the writer finished first)."""
    child = subprocess.Popen(spec.command(storage_options), cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held: list[str] = []
    try:
        assert child.stdout is not None and child.stdin is not None
        line = child.stdout.readline()
        assert line.strip() == "ready", (line, child.stderr.read() if child.stderr else "")
        child.stdin.write("go\n")
        child.stdin.flush()
        deadline = time.monotonic() + 60
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
            if changed() < at_least or not in_flight(child.pid):
                continue
            child.send_signal(signal.SIGSTOP)
            _wait_stopped(child.pid)
            held = in_flight(child.pid)
            if held:
                child.send_signal(signal.SIGKILL)
                break
            child.send_signal(signal.SIGCONT)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    return held


def _wait_stopped(pid: int) -> None:
    """Until process ``pid`` is stopped (SIGSTOP takes effect asynchronously), or has exited."""
    for _ in range(1000):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("T", "t", "Z", "X"):
            return
        time.sleep(0.001)


def _check_after_kill(spec: WriterSpec, store: Any, oracle: Any, target: str,
                      options: dict[str, Any]) -> list[str]:
    states = _shard_states(spec, store)
    torn = [f"shard {i}: {state}" for i, state in enumerate(states) if state not in ("old", "new")]
    assert not torn, torn
    with xr.open_dataset(oracle, engine="zarr", consolidated=False) as expected, \
            xr.open_dataset(target, engine="zarrmax", **options) as ours:
        xr.testing.assert_identical(ours.load(), expected.load())
    return states


def _trials(spec: WriterSpec, store: Any, oracle: Any, changed_since: Callable[[], Callable[[], int]],
            options: dict[str, Any], thresholds: tuple[int, ...], in_flight: Callable[[int], list[str]],
            child_options: dict[str, Any] | None = None) -> list[tuple[list[str], list[str]]]:
    """One killed write per threshold (the shards it must have rewritten before the kill, `_kill_writer`); after
    each kill every shard is old or new and both engines read the store alike; a write after the last kill (the
    killed one, run to its end here) leaves every shard new. Returns each trial's shard states and what the writer
    had under way when it was killed."""
    outcomes = []
    for at_least in thresholds:
        spec.write_old()
        held = _kill_writer(spec, changed_since(), at_least, in_flight, child_options)
        outcomes.append((_check_after_kill(spec, store, oracle, spec.target, options), held))
    spec.write_new()  # nothing the killed writers left (a lock, a temporary file) stands in the way
    assert _shard_states(spec, store) == ["new"] * len(spec.shard_slices())
    # Some kill landed partway: some shards new, some old (not every one: a fast writer may finish first).
    assert any("old" in states and "new" in states for states, _ in outcomes), outcomes
    return outcomes


# 8 shards of 1 MiB; the region leaves the first and last shard partly written (read, merged and written back
# under the file lock).
LOCAL = {"shape": (128, 128, 128), "chunks": (4, 128, 128), "shards": (16, 128, 128), "start": 8, "stop": 120}


def test_writer_killed_mid_write_local(tmp_path: Path) -> None:
    path = tmp_path / "killed.zarr"
    # One shard after another, on a slow disk: each file is written half, then 50 ms later the rest.
    spec = WriterSpec(str(path), **LOCAL, scheduler="synchronous", write_delay=0.05)

    def changed_since() -> Callable[[], int]:
        files = [path / "v" / "c" / str(i) / "0" / "0" for i in range(len(spec.shard_slices()))]

        def version(f: Path) -> tuple[int, ...]:
            st = f.stat()
            return st.st_ino, st.st_size, st.st_mtime_ns

        before = [version(f) for f in files]

        def count() -> int:
            n = 0
            for f, v in zip(files, before, strict=True):
                try:
                    n += version(f) != v
                except FileNotFoundError:
                    n += 1
            return n

        return count

    store = zarr.storage.LocalStore(path, read_only=True)
    nshards = len(spec.shard_slices())
    outcomes = _trials(spec, store, store, changed_since, {}, (0, nshards // 2, nshards - 1),
                       lambda pid: writing_into(pid, path))
    # Killed while writing the first file, one halfway and the last: while the file was open for writing
    assert all(held for _, held in outcomes), outcomes
    assert not list(path.rglob("*.zarrmax-tmp")), "a killed writer left temporary files"


# On MinIO, writes go through a proxy passing ``rate`` KB/s a connection, so a kill lands while a body is sent.
# One request at a time (the request budget), so that the write killed after the last-but-one shard is still
# sending the last. "puts": 8 shards of 256 KiB, the first and last partly written (merged, sent as conditional
# PUTs), a quarter second each. "multipart": 3 shards of 6 MiB, each a multipart upload of two parts (more than
# 5 MiB: multipart_threshold lowered), 1.3 s each.
MINIO = {
    "puts": ({"shape": (128, 64, 64), "chunks": (4, 64, 64), "shards": (16, 64, 64), "start": 8, "stop": 120,
              "settings": {"concurrency": 1}}, 1024, (1, 4, 7)),
    "multipart": ({"shape": (36, 256, 512), "chunks": (4, 256, 512), "shards": (12, 256, 512), "start": 0,
                   "stop": 36, "settings": {"concurrency": 1, "multipart_threshold": 5 * 2**20,
                                            "split_size": 5 * 2**20}}, 4096, (0, 1, 2)),
}


@pytest.mark.s3
@pytest.mark.parametrize("case", list(MINIO))
def test_writer_killed_mid_write_minio(case: str, minio: MinioServer, bucket: str, toxiproxy: Toxiproxy) -> None:
    import obstore

    layout, rate, thresholds = MINIO[case]
    prefix = f"killed-write{next(counter)}.zarr"
    url = f"s3://{bucket}/{prefix}"
    spec = WriterSpec(url, **layout, storage_options=minio.storage_options())
    name = f"killed_write_{next(_proxies)}"
    endpoint = toxiproxy.proxy(name, minio.port)
    toxiproxy.add_toxic(name, "bandwidth", stream="upstream", rate=rate)
    direct = minio.obstore(bucket, prefix)

    def etags() -> dict[str, str]:
        return {o["path"]: o["e_tag"] for batch in obstore.list(direct, prefix="v/c/") for o in batch}

    def changed_since() -> Callable[[], int]:
        before = etags()

        def count() -> int:
            now = etags()
            return sum(1 for k, v in before.items() if now.get(k) != v)

        return count

    oracle = s3_oracle(minio, url)
    proxy_port = int(endpoint.rsplit(":", 1)[1])
    outcomes = _trials(spec, oracle, oracle, changed_since, {"storage_options": minio.storage_options()},
                       thresholds, lambda pid: sending_to(pid, proxy_port),
                       child_options=minio.storage_options(endpoint))
    # Killed while sending a request body (a PUT's or an upload part's: a GET sends none worth queueing), always
    assert all(held for _, held in outcomes), outcomes
