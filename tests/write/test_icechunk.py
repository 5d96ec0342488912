"""Writes into Icechunk sessions: the caller commits; regions and appends in one session, tasks in other
processes through forks, compute=False returning the fork to merge; where forks and sessions writing one shard
keep only one writer's part (pinned), and read-only sessions refused."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
from tests.support.compare import check_reads
from tests.support.datasets import SHARDED, sample
from tests.support.targets import counter
from tests.support.writers import (
    CONC,
    NWRITERS,
    base_for_concurrency,
    expected_after_concurrency,
    one_step,
)
from xarray_zarrmax import request_counts
from xarray_zarrmax.storage import resolve_sink
from xarray_zarrmax.testing import MinioServer


@pytest.fixture(params=["local", "minio"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A fresh Icechunk repository on a local directory or on MinIO."""
    icechunk = pytest.importorskip("icechunk")
    if request.param == "local":
        storage = icechunk.local_filesystem_storage(str(tmp_path / "repo"))
    else:
        minio: MinioServer = request.getfixturevalue("minio")
        so = minio.storage_options()
        storage = icechunk.s3_storage(
            bucket=request.getfixturevalue("bucket"), prefix=f"write-ic{next(counter)}", region="us-east-1",
            endpoint_url=minio.endpoint, allow_http=True, force_path_style=True,
            access_key_id=so["access_key_id"], secret_access_key=so["secret_access_key"])
    return icechunk.Repository.create(storage)


def check_icechunk_reads(repo: Any, expected: xr.Dataset) -> None:
    """Both engines read the committed branch from a read-only session: engine="zarr" through its store,
    engine="zarrmax" given the session itself."""
    session = repo.readonly_session("main")
    check_reads(session, expected, oracle=session.store, consolidated=False)


@pytest.mark.parametrize("chunked", [False, True], ids=["numpy", "dask"])
def test_icechunk_session_roundtrip_both_engines(repo: Any, chunked: bool) -> None:
    ds = sample().chunk({"time": 8}) if chunked else sample()
    session = repo.writable_session("main")
    with request_counts() as counts:
        xarray_zarrmax.to_zarr(ds, session, encoding={"temp": SHARDED})
    shards = sorted(k for _, kind, k in counts.keys if kind == "put" and k.startswith("temp/c/"))
    assert shards == [f"temp/c/{t}/0/0" for t in range(3)]  # one set per shard
    assert session.has_uncommitted_changes  # written into the session, not committed: the caller commits
    session.commit("write sample")
    check_icechunk_reads(repo, sample())


def test_icechunk_group_as_dataset_to_zarr_writes_it(repo: Any) -> None:
    # zarr asks whether the group's prefix is empty; Icechunk lists only prefixes of nodes that exist, so the
    # staging store must ask it is_empty, as Dataset.to_zarr does, not list
    ds = sample().chunk({"time": 8})
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(ds, session, group="run/1", encoding={"temp": SHARDED})
    session.commit("a group")
    for engine, target in (("zarr", repo.readonly_session("main").store), ("zarrmax", repo.readonly_session("main"))):
        with xr.open_dataset(target, engine=engine, group="run/1", consolidated=False) as got:
            xr.testing.assert_identical(got.load(), sample())
    again = repo.writable_session("main")
    with pytest.raises(FileExistsError, match="Cannot create 'run/1' with mode 'w-' because it already contains"):
        xarray_zarrmax.to_zarr(ds, again, group="run/1")  # as Dataset.to_zarr refuses it


def test_staging_knows_what_is_left_under_a_prefix_after_deletes(tmp_path: Path) -> None:
    # Icechunk refuses to list a prefix that is no group or array; with deletions staged under it, whether
    # anything is left must still be answered (zarr asks is_empty before creating a group with mode "w-")
    import asyncio

    icechunk = pytest.importorskip("icechunk")
    import zarr

    from xarray_zarrmax.write.staging import StagingStore

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3)
    root.create_group("x/y")
    root.create_array("x/z", shape=(2,), dtype="i4")
    session.commit("nodes")

    async def answers() -> list[bool]:
        staging = StagingStore(repo.readonly_session("main").store)
        await staging.delete("x/y/zarr.json")
        await staging.delete("x/q/zarr.json")  # a key under a prefix that is no node in the repository
        found = [await staging.is_empty("x/y"), await staging.is_empty("x"), await staging.is_empty("x/q")]
        await staging.delete_dir("x/z")
        return [*found, await staging.is_empty("x/z"), await staging.is_empty("x/")]

    # x/y is gone; x still holds its own zarr.json and x/z; x/q never held anything; then x/z is gone too,
    # and x's zarr.json is left
    assert asyncio.run(answers()) == [True, False, True, True, False]


def test_icechunk_region_and_append_in_one_session(tmp_path: Path) -> None:
    """A region that cuts shards and an append to a partial last shard, in the session that wrote the data and
    before any commit: the merges read the session's own uncommitted shards (through the forks)."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    first = sample(nt=12)
    xarray_zarrmax.to_zarr(first.chunk({"time": 8}), session, encoding={"temp": SHARDED})
    new = sample(nt=7, t0=100)
    xarray_zarrmax.to_zarr(new[["temp"]].drop_vars(["time", "y", "x", "station"]).chunk({"time": (3, 4)}),
                           session, region={"time": slice(5, 12)})
    second = sample(nt=9, t0=12)
    xarray_zarrmax.to_zarr(second.drop_vars(["flag", "y", "x", "station"]).chunk({"time": (4, 5)}), session,
                           append_dim="time")
    session.commit("write, region, append")
    expected = xr.concat([first, second], dim="time", data_vars="minimal", coords="minimal", compat="override")
    expected["flag"] = first["flag"]
    expected["temp"][5:12] = new["temp"].values
    check_icechunk_reads(repo, expected)


def test_icechunk_tasks_in_other_processes(tmp_path: Path) -> None:
    """With the processes scheduler each task unpickles its own fork of the session, writes to it and sends it
    back; the forks are merged into the session. Nothing written by a worker is lost."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    with dask.config.set(scheduler="processes", num_workers=2):
        xarray_zarrmax.to_zarr(sample().chunk({"time": 8}), session, encoding={"temp": SHARDED})
    session.commit("from workers")
    check_icechunk_reads(repo, sample())


def test_icechunk_compute_false_returns_the_fork_to_merge(tmp_path: Path) -> None:
    """compute=False, then computed in worker processes: the result is the fork holding their writes, and the
    session has none of the data until it is merged. Computed in this process: written into the session."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    delayed = xarray_zarrmax.to_zarr(sample().chunk({"time": 8}), session, encoding={"temp": SHARDED},
                                     compute=False)
    with dask.config.set(scheduler="processes", num_workers=2):
        fork = delayed.compute()
    assert isinstance(fork, icechunk.ForkSession)
    assert not [k for k in _session_keys(session) if k.startswith("temp/c/")]  # the data is in the fork only
    session.merge(fork)
    session.commit("merged")
    check_icechunk_reads(repo, sample())
    session = repo.writable_session("main")
    ds = sample() * 2
    ds.attrs = sample().attrs
    delayed = xarray_zarrmax.to_zarr(ds[["temp"]].chunk({"time": 8}), session, mode="a", compute=False)
    assert delayed.compute() is None
    session.commit("in this process")
    expected = sample()
    expected["temp"] = ds["temp"]
    check_icechunk_reads(repo, expected)


def _session_keys(session: Any) -> list[str]:
    from xarray_zarrmax.core.loop import run_sync

    async def keys() -> list[str]:
        return [k async for k in session.store.list()]

    return run_sync(keys())


def _write_worker_part(fork: Any, t0: int, t1: int) -> Any:
    part = sample().isel(time=slice(t0, t1))[["temp"]].drop_vars(["time", "y", "x", "station"])
    xarray_zarrmax.to_zarr(part, fork, region={"time": slice(t0, t1)})
    return fork


def test_icechunk_distributed_forks_in_a_process_pool(tmp_path: Path) -> None:
    """Icechunk's pattern for distributed writes: metadata from the coordinator, then one fork per worker
    (pickled to a spawned process), each writing its own shards (a whole one, or the partial last one),
    merged back and committed once."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    ds = sample()
    ds["temp"] = ds["temp"].chunk({"time": 8})
    xarray_zarrmax.to_zarr(ds, session, encoding={"temp": SHARDED}, compute=False)  # metadata, numpy variables
    parts = [(0, 8), (8, 16), (16, 20)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        forks = pool.starmap(_write_worker_part, [(session.fork(), a, b) for a, b in parts])
    session.merge(*forks)
    session.commit("distributed")
    check_icechunk_reads(repo, sample())


def test_icechunk_forks_writing_one_shard_keep_only_the_last_merged(tmp_path: Path) -> None:
    """What docs/guide/writing.md says is not safe: two forks each writing part of the same shard. Each reads the
    shard as of the fork, merges its part and sets the whole shard; Icechunk merges forks last-writer-wins,
    so the first fork's part is lost, silently. (Pinned so that a change in Icechunk shows here.)"""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(base_for_concurrency(), session, encoding={"v": CONC})
    a, b = session.fork(), session.fork()
    xarray_zarrmax.to_zarr(one_step(0), a, region={"time": slice(0, 1)})
    xarray_zarrmax.to_zarr(one_step(1), b, region={"time": slice(1, 2)})  # the same shard
    session.merge(a, b)
    session.commit("two forks, one shard")
    got = xr.open_dataset(repo.readonly_session("main"), engine="zarrmax")["v"].values
    assert (got[0] == -1).all() and (got[1] == 1).all()  # a's write is gone


def test_icechunk_concurrent_sessions_writing_one_shard_conflict(tmp_path: Path) -> None:
    """Two sessions (two processes' worth) that each write part of one shard: the second commit is refused
    (Icechunk's conflict detection), and so is a rebase with ConflictDetector."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(base_for_concurrency(), session, encoding={"v": CONC})
    session.commit("base")
    a, b = repo.writable_session("main"), repo.writable_session("main")
    xarray_zarrmax.to_zarr(one_step(0), a, region={"time": slice(0, 1)})
    xarray_zarrmax.to_zarr(one_step(1), b, region={"time": slice(1, 2)})
    a.commit("a")
    with pytest.raises(icechunk.ConflictError):
        b.commit("b")
    with pytest.raises(icechunk.RebaseFailedError):
        b.commit("b", rebase_with=icechunk.ConflictDetector())
    # What docs/dev/writing.md warns of: a solver that picks one version of a conflicting shard keeps b's whole
    # shard, read before a's commit, so a's time step is lost.
    b.commit("b", rebase_with=icechunk.BasicConflictSolver())
    got = xr.open_dataset(repo.readonly_session("main"), engine="zarrmax")["v"].values
    assert (got[0] == -1).all() and (got[1] == 1).all()


def test_icechunk_threads_in_one_session_lose_nothing(tmp_path: Path) -> None:
    """16 threads writing one time step each into two shards of one session: the in-process lock per object
    serialises their read-merge-writes."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(base_for_concurrency(), session, encoding={"v": CONC})
    start = threading.Barrier(NWRITERS)

    def run(t: int) -> None:
        start.wait()
        xarray_zarrmax.to_zarr(one_step(t), session, region={"time": slice(t, t + 1)})

    with ThreadPoolExecutor(NWRITERS) as pool:
        list(pool.map(run, range(NWRITERS)))
    session.commit("16 threads")
    check_icechunk_reads(repo, expected_after_concurrency())


def test_icechunk_refuses_read_only_sessions_and_names_the_session(tmp_path: Path) -> None:
    icechunk = pytest.importorskip("icechunk")
    import pickle

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    with pytest.raises(ValueError, match="writable Icechunk session.*Got a read-only session at snapshot"):
        xarray_zarrmax.to_zarr(sample(), repo.readonly_session("main"))
    sink = resolve_sink(repo.writable_session("main"))
    assert "branch 'main'" in sink.label
    copy = pickle.loads(pickle.dumps(sink))  # a fork of the session, whose writes the task returns
    assert isinstance(copy.session, icechunk.ForkSession) and copy.task_result() is copy.session
    assert sink.task_result() is None


def test_icechunk_mode_w_replaces_everything(tmp_path: Path) -> None:
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(sample(), session, encoding={"temp": SHARDED})
    session.commit("first")
    session = repo.writable_session("main")
    other = xr.Dataset({"other": (("z",), np.arange(3.0))})
    xarray_zarrmax.to_zarr(other, session, mode="w")
    session.commit("replaced")
    check_icechunk_reads(repo, other)
    assert sorted(_session_keys(repo.readonly_session("main"))) == ["other/c/0", "other/zarr.json", "zarr.json"]
