"""Dask tasks of a write: one per shard, or per group of whole small objects, each depending on its own block
only, run on the caller's scheduler or in other processes; dask chunks must align to shards (or be aligned)."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

import xarray_zarrmax
from tests.support.compare import check_reads, s3_oracle
from tests.support.datasets import SHARDED, sample
from tests.support.targets import counter
from xarray_zarrmax.testing import MinioServer
from xarray_zarrmax.write.plan import aligned_chunks, check_aligned, misaligned_boundary, objects_for_block


def test_one_dask_task_per_shard(tmp_path: Path) -> None:
    """Writing runs exactly one write task per shard (dask chunk = shard here)."""
    calls = []
    seen = threading.Lock()
    original = xarray_zarrmax.write.dataset.write_blocks

    def counting(blocks: Any, write: Any, sink: Any, starts: list[tuple[int, ...]]) -> int:
        with seen:
            calls.append((write.path, starts))
        return original(blocks, write, sink, starts)

    ds = sample().drop_vars(["count", "flag"]).chunk({"time": 8})
    import unittest.mock

    with unittest.mock.patch.object(xarray_zarrmax.write.dataset, "write_blocks", counting):
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED})
    assert sorted(starts for path, starts in calls if path == "temp") == [[(0, 0, 0)], [(8, 0, 0)], [(16, 0, 0)]]
    check_reads(tmp_path / "a.zarr", sample().drop_vars(["count", "flag"]))


def test_each_write_task_depends_on_its_own_block_only(tmp_path: Path) -> None:
    """A task must receive one block, never the whole array (a dask array inside a task's arguments would make
    every task wait for, and hold, all of it)."""
    from dask.core import get_dependencies

    ds = sample().chunk({"time": 8})
    delayed = xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED}, compute=False)
    graph = dict(delayed.__dask_graph__())
    tasks = [key for key in graph if str(key[0] if isinstance(key, tuple) else key).startswith("write_block")]
    # temp and count (8, 8, 4) and station; flag and the index coordinates are numpy: written at once, as
    # Dataset.to_zarr does with compute=False
    assert len(tasks) == 3 + 3 + 1
    assert all(len(get_dependencies(graph, key)) == 1 for key in tasks)


def test_tasks_run_in_other_processes(minio: MinioServer, bucket: str) -> None:
    """Tasks pickle (sink with its credentials, codec with zarr's metadata) and write from spawned workers."""
    url, so = f"s3://{bucket}/procs{next(counter)}.zarr", minio.storage_options()
    ds = sample().chunk({"time": 8})
    delayed = xarray_zarrmax.to_zarr(ds, url, encoding={"temp": SHARDED}, storage_options=so, compute=False)
    with dask.config.set(scheduler="processes", num_workers=2):
        delayed.compute()
    check_reads(url, sample(), oracle=s3_oracle(minio, url), storage_options=so)


def test_misaligned_dask_chunks_name_variable_dimension_and_sizes(tmp_path: Path) -> None:
    ds = sample().chunk({"time": 5})
    with pytest.raises(ValueError, match=r"variable 'temp'.*dimension 'time'.*\(5, 5, 5, 5\).*element 5.*8"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED})
    assert not (tmp_path / "a.zarr/zarr.json").exists()  # refused before anything was written


@pytest.mark.parametrize("option", [{"align_chunks": True}, {"safe_chunks": False}])
def test_align_chunks_rechunks_to_shards(tmp_path: Path, option: dict[str, bool]) -> None:
    """safe_chunks=False (xarray: "skip the check, I take the risk") rechunks as align_chunks=True does: no
    shard is ever written by two tasks, so there is no risk to take."""
    ds = sample().chunk({"time": 5})
    with pytest.raises(ValueError, match=r"align_chunks=True \(or safe_chunks=False\)"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "refused.zarr", encoding={"temp": SHARDED})
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED}, **option)
    check_reads(tmp_path / "a.zarr", sample())
    with pytest.raises(ValueError, match="expected safe_chunks as a bool. Got 'no'"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "b.zarr", safe_chunks="no")  # type: ignore[arg-type]


def test_chunkmanager_store_kwargs_reach_dask_compute(tmp_path: Path) -> None:
    """As Dataset.to_zarr: chunkmanager_store_kwargs are the keywords the data tasks are computed with (here a
    scheduler that counts the graphs it runs); store-only ones are refused by name; a lock is not needed."""
    graphs = []

    def counting_scheduler(graph: Any, keys: Any, **kwargs: Any) -> Any:
        graphs.append(keys)
        return dask.get(graph, keys, **kwargs)

    ds = sample().chunk({"time": 8})
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED},
                           chunkmanager_store_kwargs={"scheduler": counting_scheduler, "lock": False})
    assert len(graphs) == 1 and any("zarrmax-done" in str(k) for k in graphs[0])
    check_reads(tmp_path / "a.zarr", sample())
    with pytest.raises(ValueError, match=r"\['regions', 'return_stored'\] are arguments of dask.array.store"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "b.zarr", chunkmanager_store_kwargs={"regions": None,
                                                                                  "return_stored": True})
    assert not (tmp_path / "b.zarr").exists()


def test_dask_chunks_of_unknown_size_are_refused_by_name(tmp_path: Path) -> None:
    import dask.array as da

    values = da.from_array(np.arange(6.0), chunks=3)
    ds = xr.Dataset({"a": (("x",), values[values > 1])})
    with pytest.raises(ValueError, match=r"variable 'a' has dask chunks of unknown size \(\(nan, nan\),\)"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr")
    assert not (tmp_path / "a.zarr").exists()


def test_objects_for_block() -> None:
    parts = list(objects_for_block((20,), (8,), (5,), (7,)))
    assert [(p.coords, p.in_object, p.in_block, p.whole) for p in parts] == [
        ((0,), (slice(5, 8),), (slice(0, 3),), False),
        ((1,), (slice(0, 4),), (slice(3, 7),), False),
    ]
    edge = list(objects_for_block((20, 3), (8, 4), (16, 0), (4, 3)))
    assert [(p.coords, p.whole) for p in edge] == [((2, 0), True)]  # the array ends inside the object
    assert [p.coords for p in objects_for_block((), (), (), ())] == [()]
    assert list(objects_for_block((5,), (2,), (0,), (0,))) == []


def test_objects_for_block_cover_every_element_once() -> None:
    for start, n in itertools.product(range(0, 12), range(1, 9)):
        if start + n > 20:
            continue
        covered = np.zeros(20, int)
        for p in objects_for_block((20,), (3,), (start,), (n,)):
            lo = p.coords[0] * 3
            covered[lo + p.in_object[0].start:lo + p.in_object[0].stop] += 1
            assert p.in_block[0].stop - p.in_block[0].start == p.in_object[0].stop - p.in_object[0].start
        assert covered.tolist() == [1 if start <= i < start + n else 0 for i in range(20)]


def test_alignment_rules() -> None:
    assert misaligned_boundary(0, (8, 8, 4), 8) is None
    assert misaligned_boundary(5, (3, 8, 2), 8) is None  # edges inside shards are fine
    assert misaligned_boundary(0, (5, 5), 8) == 5
    assert aligned_chunks(5, 15, 8) == (3, 8, 4)
    assert aligned_chunks(0, 16, 8) == (8, 8)
    assert aligned_chunks(0, 0, 8) == (0,)
    with pytest.raises(ValueError, match="'v'.*'t'"):
        check_aligned("v", ("t",), (0,), ((5, 5),), (8,), "shard")


@given(start=st.integers(0, 40), length=st.integers(0, 120), size=st.integers(1, 16),
       rows=st.integers(1, 5), target=st.integers(1, 4096), min_blocks=st.integers(1, 8))
def test_in_memory_data_is_cut_into_blocks_of_whole_objects(start: int, length: int, size: int, rows: int,
                                                           target: int, min_blocks: int) -> None:
    """Blocks of whole objects: every boundary between two blocks is an object boundary, and each block holds
    at most as many objects as fit in ``target`` (one at least) and as leave ``min_blocks`` blocks."""
    from xarray_zarrmax.write.plan import grouped_chunks

    chunks = grouped_chunks((start, 0), (length, rows), (size, 2), 8, target_bytes=target, min_blocks=min_blocks)
    assert tuple(sum(c) for c in chunks) == (length, rows)
    assert misaligned_boundary(start, chunks[0], size) is None and misaligned_boundary(0, chunks[1], 2) is None
    objects = len(aligned_chunks(start, length, size)) * len(aligned_chunks(0, rows, 2))
    most = max(1, min(target // (size * 2 * 8), -(-objects // min_blocks)))
    starts = np.cumsum((start, *chunks[0][:-1]))
    rows_starts = np.cumsum((0, *chunks[1][:-1]))
    for a, n in zip(starts, chunks[0], strict=True):
        for r, m in zip(rows_starts, chunks[1], strict=True):
            assert len(aligned_chunks(int(a), n, size)) * len(aligned_chunks(int(r), m, 2)) <= most


def test_in_memory_data_of_small_objects_is_written_in_few_tasks(tmp_path: Path) -> None:
    """Not one task per object: with 2 dask threads, 4 tasks for 240 chunks (each task sends its PUTs at
    once), and the store reads back as Dataset.to_zarr's."""
    calls = []
    original = xarray_zarrmax.write.dataset.write_blocks
    seen = threading.Lock()

    def counting(blocks: Any, write: Any, sink: Any, starts: list[tuple[int, ...]]) -> int:
        with seen:
            calls.extend((write.path, start, block.shape) for block, start in zip(blocks, starts, strict=True))
        return original(blocks, write, sink, starts)

    import unittest.mock

    values = np.random.default_rng(0).normal(size=(2, 721, 1440)).astype("f4")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values)})
    encoding = {"t2m": {"chunks": (1, 100, 100)}}
    with unittest.mock.patch.object(xarray_zarrmax.write.dataset, "write_blocks", counting), \
            dask.config.set(num_workers=2):
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding=encoding)
    assert sorted(calls) == [("t2m", (t, lat, 0), (1, n, 1440)) for t in (0, 1) for lat, n in ((0, 400), (400, 321))]
    ds.to_zarr(tmp_path / "b.zarr", encoding=encoding, zarr_format=3)
    for name in sorted(os.listdir(tmp_path / "b.zarr/t2m/c/1/7")):
        ours, theirs = (tmp_path / f"{store}.zarr/t2m/c/1/7/{name}" for store in "ab")
        assert ours.read_bytes() == theirs.read_bytes(), name
    check_reads(tmp_path / "a.zarr", ds)


def test_small_dask_blocks_are_written_in_groups_each_task_holding_only_its_own(tmp_path: Path) -> None:
    """240 dask blocks of one 40 kB chunk each, 2 dask threads: 4 write tasks of 60 blocks, each depending on
    exactly its own blocks (never the whole array), and the store is Dataset.to_zarr's."""
    from dask.core import get_dependencies

    values = np.random.default_rng(0).normal(size=(2, 721, 1440)).astype("f4")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values)}).chunk({"time": 1, "lat": 100, "lon": 100})
    encoding = {"t2m": {"chunks": (1, 100, 100)}}
    with dask.config.set(num_workers=2):
        delayed = xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding=encoding, compute=False)
    graph = dict(delayed.__dask_graph__())
    tasks = [key for key in graph if str(key[0] if isinstance(key, tuple) else key).startswith("write_block")]
    groups = sorted(sorted(key[1:] for key in get_dependencies(graph, task)) for task in tasks)
    assert groups == [[(t, lat, lon) for lat in lats for lon in range(15)]
                      for t in (0, 1) for lats in (range(4), range(4, 8))]
    delayed.compute()
    ds.to_zarr(tmp_path / "b.zarr", encoding=encoding, zarr_format=3)
    for name in sorted(os.listdir(tmp_path / "b.zarr/t2m/c/0/7")):
        ours, theirs = (tmp_path / f"{store}.zarr/t2m/c/0/7/{name}" for store in "ab")
        assert ours.read_bytes() == theirs.read_bytes(), name
    check_reads(tmp_path / "a.zarr", ds.compute())


def test_dask_scheduler_is_the_callers(tmp_path: Path) -> None:
    """The data tasks run on whatever scheduler is in force (here: synchronous, in this thread)."""
    threads = set()
    original = xarray_zarrmax.write.dataset.write_blocks

    def recording(*args: Any, **kwargs: Any) -> int:
        threads.add(threading.get_ident())
        return original(*args, **kwargs)

    import unittest.mock

    with unittest.mock.patch.object(xarray_zarrmax.write.dataset, "write_blocks", recording), \
            dask.config.set(scheduler="synchronous"):
        xarray_zarrmax.to_zarr(sample().chunk({"time": 8}), tmp_path / "a.zarr", encoding={"temp": SHARDED})
    assert threads == {threading.get_ident()}
