"""engine="zarrmax" against zarr-python's reading (engine="zarr") of the same store, on every store kind:
random arrays and selections, whole groups, and data rewritten between two reads of one open Dataset."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.compare import assert_same_dataset, assert_same_values
from tests.support.strategies import (
    ArraySpec,
    Edit,
    ShardIndex,
    any_selection,
    apply_edit,
    array_specs,
    before_edits,
    edits,
    group_specs,
    write_array,
    write_group,
)
from xarray_zarrmax import set_config

# Examples per store kind, tuned so that this module takes about 3 minutes on a 2-core machine (all five kinds,
# every example run to the end); CI runs all of it, so measure again before raising them.
EXAMPLES = {"local": 100, "memory": 100, "minio": 40, "icechunk-local": 40, "icechunk-minio": 25}
GROUP_EXAMPLES = {"local": 50, "memory": 50, "minio": 20, "icechunk-local": 25, "icechunk-minio": 15}
REWRITE_EXAMPLES = {"local": 60, "memory": 60, "minio": 25, "icechunk-local": 25, "icechunk-minio": 15}
# Each store also exercises a different read path: partial shard reads with one range per chunk (memory),
# whole objects split into many parallel ranges (minio), the defaults elsewhere.
CONFIG = {"memory": {"full_shard_fraction": 1.0, "coalesce_gap": 0}, "minio": {"split_size": 97}}
CHUNKS = [{}, None]  # dask, one chunk per shard; and lazy indexing straight through the backend array


def _settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck))


def _open(target: Any, chunks: dict | None, open_kwargs: dict[str, Any] | None = None, **kw: Any) -> xr.Dataset:
    """engine="zarrmax"; without dask, xarray's in-memory cache is off so every read reaches the store."""
    cache = {"cache": False} if chunks is None else {}
    return xr.open_dataset(target, engine="zarrmax", chunks=chunks, **(open_kwargs or {}), **cache, **kw)


def _oracle(store: Any, chunks: dict | None = None, consolidated: bool = False, **kw: Any) -> xr.Dataset:
    cache = {"cache": False} if chunks is None else {}
    return xr.open_dataset(store, engine="zarr", chunks=chunks, consolidated=consolidated, storage_options=None,
                           **cache, **kw)


def _kind_specs(kind: str, **kw: Any) -> st.SearchStrategy[ArraySpec]:
    return array_specs(zarr_format=3, **kw) if kind.startswith("icechunk") else array_specs(**kw)  # v3 only


def test_hypothesis_arrays_and_selections(store_factory):
    kind = store_factory.kind

    @_settings(EXAMPLES[kind])
    @given(data=st.data(), spec=_kind_specs(kind))
    def run(data, spec):
        written = store_factory.new()
        write_array(written.store, spec)
        written.finish()
        # 0: one dask task per stored object, as engine="zarr"; else small objects grouped into tasks
        task_bytes = data.draw(st.sampled_from([0, 64, 4096, 32 << 20]), label="task_bytes")
        # engine="zarr" opened the same way: with dask, a vectorized selection's byte order is dask's choice
        with set_config(task_bytes=task_bytes):
            pairs = [(_open(written.target, chunks, written.open_kwargs), _oracle(written.oracle_store, chunks))
                     for chunks in CHUNKS]
        ours = pairs[0][0]
        if spec.shape:  # 0-d arrays are not chunked
            if task_bytes == 0:  # exactly one dask chunk per shard (or per chunk when unsharded)
                expected = tuple(min(c, s) for c, s in zip(spec.outer, spec.shape, strict=True))
                assert tuple(c[0] for c in ours["v"].chunks) == expected
            for sizes, outer in zip(ours["v"].chunks, spec.outer, strict=True):  # tasks hold whole objects
                assert all(stop % outer == 0 for stop in np.cumsum(sizes[:-1]))
        # values, dtype, attributes, encoding; each against engine="zarr" opened the same way (a big-endian
        # datetime comes back native through dask and big-endian without it, with engine="zarr" too)
        for mine, theirs in pairs:
            assert_same_dataset(mine.compute(), theirs.compute())
        for _ in range(3):
            sel = data.draw(any_selection(spec.shape, spec.dims))
            for mine, theirs in pairs:
                assert_same_values(mine["v"].isel(sel), theirs["v"].isel(sel))

    with set_config(**CONFIG.get(kind, {})):
        run()


def test_hypothesis_groups(store_factory):
    """Several variables and index coordinates in one group (nested or not), with and without consolidated
    metadata: the whole Dataset, coordinates and encodings included, then a selection of it."""
    kind = store_factory.kind
    icechunk = kind.startswith("icechunk")  # v3 only; Icechunk has no use for consolidated metadata
    specs = group_specs(zarr_format=3 if icechunk else None, consolidate=not icechunk)

    @_settings(GROUP_EXAMPLES[kind])
    @given(data=st.data(), spec=specs)
    def run(data, spec):
        written = store_factory.new()
        write_group(written.store, spec)
        written.finish()
        group = spec.path or None
        sizes = spec.sizes()
        sel = data.draw(any_selection(tuple(sizes.values()), tuple(sizes)))
        for chunks in CHUNKS:
            ours = _open(written.target, chunks, written.open_kwargs, group=group)  # consolidated: found or not
            # xarray reads consolidated metadata from the root only; we find it in the group too
            oracle = _oracle(written.oracle_store, chunks, consolidated=spec.consolidated == "root", group=group)
            assert_same_dataset(ours.compute(), oracle.compute())
            assert_same_dataset(ours.isel(sel).compute(), oracle.isel(sel).compute())

    with set_config(**CONFIG.get(kind, {})):
        run()


# -- rewrites between reads --------------------------------------------------------------------------------


def _reads(ds: xr.Dataset, sel: dict[str, Any]) -> list[xr.DataArray]:
    """What each round reads: the whole variable (whole shards) and a selection (partial shard reads)."""
    return [ds["v"], ds["v"].isel(sel)]


def rewrite_between_reads(store_factory, spec: ArraySpec, changes: list[Edit], sel: dict[str, Any]) -> None:
    """Open with both engines (dask and not), read, change the stored data, read again from the same open
    Datasets and from copies pickled after the change: each gives what engine="zarr" opened afresh on the same
    target gives."""
    written = store_factory.new()
    write_array(written.store, spec)
    written.finish()
    target, oracle_store = written.target, written.oracle_store
    opened = [(chunks, _open(target, chunks, written.open_kwargs), _oracle(oracle_store, chunks))
              for chunks in CHUNKS]
    for _, ours, theirs in opened:
        for a, b in zip(_reads(ours, sel), _reads(theirs, sel), strict=True):
            assert_same_values(a, b)

    store = written.rewrite()
    for edit in changes:
        apply_edit(store, spec, edit)
    written.finish()

    # What the same open Datasets must give now: the new data, or (Icechunk) the snapshot they opened.
    for chunks, ours, theirs in opened:
        expected = _reads(_oracle(oracle_store, chunks), sel)
        for got, want in zip(_reads(theirs, sel), expected, strict=True):
            assert_same_values(got, want)  # control: zarr-python sees the rewrite through a Dataset opened before it
        for label, ds in (("same Dataset", ours), ("pickled copy", pickle.loads(pickle.dumps(ours)))):
            for got, want in zip(_reads(ds, sel), expected, strict=True):
                try:
                    assert_same_values(got, want)
                except Exception as err:
                    err.add_note(f"reading the {label} (chunks={chunks}) after the rewrite")
                    raise
    if written.snapshots:  # and a new open sees the new snapshot
        fresh = _reads(_oracle(written.oracle_store, {}), sel)
        for got, want in zip(_reads(_open(written.target, {}, written.open_kwargs), sel), fresh, strict=True):
            assert_same_values(got, want)


def test_hypothesis_rewrites_between_reads(store_factory):
    kind = store_factory.kind
    # mostly sharded: a cached shard index is what a rewrite can leave stale
    specs = st.one_of(array_specs(sharded=True), array_specs(sharded=True), _kind_specs(kind)).filter(
        lambda s: bool(s.shape))

    @_settings(REWRITE_EXAMPLES[kind])
    @given(data=st.data(), spec=specs)
    def run(data, spec):
        spec, changes = data.draw(edits(spec))
        rewrite_between_reads(store_factory, spec, changes, data.draw(any_selection(spec.shape, spec.dims)))

    with set_config(**CONFIG.get(kind, {})):
        run()


def _sharded(compressor: str | None, index: ShardIndex | None = None) -> ArraySpec:
    """(40, 30) int32 in shards of 20 x 30, four chunks of 10 x 15 each; random values fill every chunk."""
    return ArraySpec(3, (40, 30), (10, 15), (20, 30), "int32", "little", compressor, False, False, "C", -1, [], 5,
                     ("y", "x"), index or ShardIndex())


def _unsharded() -> ArraySpec:
    """(40, 30) big-endian float64 in chunks of 10 x 15, blosc and crc32c."""
    return ArraySpec(3, (40, 30), (10, 15), None, "float64", "big", "blosc", True, False, "C", 0.0, [], 5, ("y", "x"))


WHOLE_SHARD_0 = (slice(0, 20), slice(0, 30))
REWRITES = {
    # name: (spec, edits); every edit touches shard 0, which the first round of reads has read
    "same-size-shard": (_sharded(None), [Edit("values", (0, 0), WHOLE_SHARD_0, 11)]),
    # uncompressed: chunk (0, 1) takes the place chunk (0, 0) had in the shard, whose size does not change
    "same-size-shard-chunk-moved": (dataclasses.replace(_sharded(None), missing=[(0, 1)]),
                                    [Edit("fill", (0, 0), (slice(0, 10), slice(0, 15)), 0),
                                     Edit("values", (0, 0), (slice(0, 10), slice(15, 30)), 16)]),
    "resized-shard": (_sharded("zstd"), [Edit("compressible", (0, 0), WHOLE_SHARD_0, 11),
                                         Edit("values", (0, 0), (slice(0, 10), slice(0, 15)), 12)]),
    "chunk-emptied-in-shard": (_sharded("zstd", ShardIndex("start", "big", 1)),
                               [Edit("compressible", (0, 0), (slice(10, 20), slice(15, 30)), 13)]),
    "shard-deleted": (_sharded("zstd"), [Edit("delete", (0, 0), WHOLE_SHARD_0, 0)]),
    "shard-added": (_sharded("zstd"), [Edit("add", (0, 0), WHOLE_SHARD_0, 14)]),
    "unsharded-chunk-resized": (_unsharded(), [Edit("compressible", (0, 0), (slice(0, 10), slice(0, 15)), 15)]),
    "unsharded-chunk-deleted": (_unsharded(), [Edit("delete", (0, 0), (slice(0, 10), slice(0, 15)), 0)]),
}


@pytest.mark.parametrize("case", sorted(REWRITES))
def test_rewrite_between_reads(store_factory, case):
    """Named cases of the hypothesis test above, each read first whole, then in part (rows 5-11 of shard 0)."""
    spec, changes = REWRITES[case]
    spec = before_edits(spec, changes)
    with set_config(**CONFIG.get(store_factory.kind, {})):
        rewrite_between_reads(store_factory, spec, changes, {"y": slice(5, 12)})
