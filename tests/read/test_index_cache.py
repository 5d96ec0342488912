"""The shard-index cache holds what it says: an open's indexes go when its Dataset is closed, and the cap counts
what an entry costs, not only its index's bytes (issue 46: open/read/close cycles left every index behind)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_zarrmax.read import index_cache
from xarray_zarrmax.storage.abc import Fetched
from xarray_zarrmax.tuning import INDEX_ENTRY_BYTES


@pytest.fixture
def empty_cache() -> Iterator[None]:
    """The process's cache emptied for the test, and what it held put back after."""
    with index_cache._index_lock:
        saved = (index_cache._index_cache.copy(), index_cache._index_cache_bytes,
                 {k: set(v) for k, v in index_cache._keys_of.items()})
        index_cache._index_cache.clear()
        index_cache._index_cache_bytes = 0
        index_cache._keys_of.clear()
    yield
    with index_cache._index_lock:
        index_cache._index_cache.clear()
        index_cache._index_cache.update(saved[0])
        index_cache._index_cache_bytes = saved[1]
        index_cache._keys_of.clear()
        index_cache._keys_of.update(saved[2])


def _remember(token: str, key: str, chunks: int = 4) -> None:
    index = np.zeros((chunks, 2), dtype="u8")
    index_cache.remember(token, key, index, Fetched(b"", 100, f'"{token}{key}"', True))


def test_forget_store_drops_that_stores_indexes_only(empty_cache: None) -> None:
    for key in ("v/c/0/0", "v/c/1/0", "w/c/0"):
        _remember("a", key)
    _remember("b", "v/c/0/0")
    index_cache.forget_store("a")
    assert index_cache.tokens() == {"b"}
    assert index_cache.size() == (1, 64 + INDEX_ENTRY_BYTES)
    assert index_cache.lookup("a", "v/c/0/0") is None and index_cache.lookup("b", "v/c/0/0") is not None
    index_cache.forget_store("a")  # twice, or a store that kept nothing: nothing happens
    index_cache.forget("b", "v/c/0/0")
    assert index_cache.size() == (0, 0)
    assert index_cache._keys_of == {}


def test_the_cap_counts_what_an_entry_costs(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten 64-byte indexes against a cap of four entries' cost: the four most recent are kept."""
    monkeypatch.setattr(index_cache, "INDEX_CACHE_BYTES", 4 * (64 + INDEX_ENTRY_BYTES))
    for i in range(10):
        _remember("a", f"v/c/{i}")
    assert index_cache.size() == (4, 4 * (64 + INDEX_ENTRY_BYTES))
    assert [index_cache.lookup("a", f"v/c/{i}") is not None for i in range(10)] == [False] * 6 + [True] * 4


def test_closing_the_dataset_drops_its_indexes(empty_cache: None, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from xarray_zarrmax.storage import local

    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)  # files just written are cacheable: no 2 s wait
    path = tmp_path / "s.zarr"
    arr = zarr.open_group(path, mode="w", zarr_format=3).create_array(
        "v", shape=(32, 8), chunks=(4, 8), shards=(16, 8), dtype="f4", dimension_names=["t", "x"])
    arr[:] = np.arange(32 * 8, dtype="f4").reshape(32, 8)
    ds = xr.open_dataset(path, engine="zarrmax", consolidated=False)
    np.testing.assert_array_equal(ds["v"][0:2].values, arr[0:2])  # one chunk of four: index, then a range
    np.testing.assert_array_equal(ds["v"][17:18].values, arr[17:18])
    assert index_cache.size()[0] == 2
    ds.close()
    assert index_cache.size() == (0, 0)
    np.testing.assert_array_equal(ds["v"][0:2].values, arr[0:2])  # read after close: the index read again
