"""Data and request counting for tests and benchmarks: example groups and trees, and a zarr Store wrapper
that counts the requests zarr-python sends (the engine="zarr" side of every request-count comparison)."""
from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import Any, Literal

# -- datasets for tests and benchmarks -----------------------------------------------------------------


def write_many_variable_group(store: Any, n_vars: int = 273, *, consolidated: bool = False,
                              shape: tuple[int, int, int] = (24, 32, 64)) -> list[str]:
    """An ERA5-like Zarr v3 group: ``n_vars`` data variables on (time, latitude, longitude) plus 4 coordinates
    (time, latitude, longitude, level). Data variables hold no chunks (all fill value): what is measured
    is metadata. Returns the data variable names."""
    import numpy as np
    import zarr

    nt, ny, nx = shape
    group = zarr.open_group(store, mode="w", zarr_format=3, attributes={"title": "ERA5-like", "Conventions": "CF-1.8"})
    coords: dict[str, tuple[Any, dict[str, Any]]] = {
        "time": (np.arange(nt, dtype="i8"), {"units": "hours since 2020-01-01", "calendar": "proleptic_gregorian"}),
        "latitude": (np.linspace(90, -90, ny), {"units": "degrees_north"}),
        "longitude": (np.linspace(0, 360, nx, endpoint=False), {"units": "degrees_east"}),
        "level": (np.array([1000, 850, 500, 250], dtype="i4"), {"units": "hPa"}),
    }
    for name, (values, attrs) in coords.items():
        arr = group.create_array(name, shape=values.shape, chunks=values.shape, dtype=values.dtype,
                                 dimension_names=[name], attributes=attrs, fill_value=0)
        arr[:] = values
    names = [f"var{i:03d}" for i in range(n_vars)]
    for name in names:
        group.create_array(name, shape=shape, chunks=(1, ny, nx), shards=(nt, ny, nx), dtype="f4",
                           dimension_names=["time", "latitude", "longitude"], fill_value=float("nan"),
                           attributes={"units": "K", "long_name": name})
    if consolidated:
        zarr.consolidate_metadata(store)
    return names


#: The groups of `write_group_tree`: the root, 3 children, 2 grandchildren each (10 groups over 3 levels).
TREE_GROUPS = ("", "a", "b", "c", "a/p", "a/q", "b/p", "b/q", "c/p", "c/q")


def write_group_tree(store: Any, zarr_format: Literal[2, 3] = 3, *, consolidated: bool = False,
                     arrays_per_group: int = 10, groups: Iterable[str] = TREE_GROUPS) -> None:
    """A hierarchy for ``open_datatree``: in the i-th of ``groups``, an index coordinate ``d{i}`` (5 values, one
    chunk) and ``arrays_per_group - 1`` variables on (``d{i}``, y) holding no chunks (all fill value): what is
    measured is metadata and index coordinates. Each group has its own dimension, so the tree aligns."""
    import numpy as np
    import zarr

    root = zarr.open_group(store, mode="w", zarr_format=zarr_format, attributes={"title": "group tree"})
    for i, path in enumerate(groups):
        group = root if not path else root.create_group(path, attributes={"level": path.count("/") + 1})

        def dims(*names: str) -> dict[str, Any]:
            if zarr_format == 3:
                return {"dimension_names": list(names)}
            return {"attributes": {"_ARRAY_DIMENSIONS": list(names)}}

        dim = f"d{i}"
        group.create_array(dim, shape=(5,), chunks=(5,), dtype="i8", **dims(dim))[:] = np.arange(5) + i
        for j in range(arrays_per_group - 1):
            group.create_array(f"v{j}", shape=(5, 4), chunks=(5, 4), dtype="f4", fill_value=0.0, **dims(dim, "y"))
    if consolidated:
        zarr.consolidate_metadata(store)


# -- counting the requests zarr-python sends (engine="zarr") --------------------------------------------------


def counting_store(store: Any, counts: Counter[str] | None = None) -> Any:
    """``store`` wrapped so that every request zarr-python sends through it is counted into ``counts``: GETs
    (whole, ranged, and each batch of ``get_ranges``), LISTs (one per listing call) and HEADs (``exists``,
    ``getsize``); ``counts["bytes"]`` adds up the bytes the GETs returned. zarr's ``LoggingStore`` counts
    method calls but lets ``get_ranges`` and ``_get_many`` through uncounted and logs every call, so the suite
    has its own small wrapper."""
    from zarr.storage import WrapperStore

    class CountingStore(WrapperStore):  # type: ignore[type-arg]
        def __init__(self, store: Any, counts: Counter[str] | None = None) -> None:
            super().__init__(store)
            self.counts: Counter[str] = Counter() if counts is None else counts

        def _with_store(self, store: Any) -> CountingStore:
            return type(self)(store, self.counts)  # with_read_only() and friends keep counting

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            self.counts["get"] += 1
            got = await self._store.get(key, prototype, byte_range)
            self.counts["bytes"] += _nbytes(got)
            return got

        def get_sync(self, key: str, *, prototype: Any = None, byte_range: Any = None) -> Any:
            self.counts["get"] += 1
            got = super().get_sync(key, prototype=prototype, byte_range=byte_range)
            self.counts["bytes"] += _nbytes(got)
            return got

        async def get_partial_values(self, prototype: Any, key_ranges: Iterable[tuple[str, Any]]) -> Any:
            key_ranges = list(key_ranges)
            self.counts["get"] += len(key_ranges)
            got = await self._store.get_partial_values(prototype, key_ranges)
            self.counts["bytes"] += sum(_nbytes(g) for g in got)
            return got

        async def get_ranges(self, key: str, byte_ranges: Sequence[Any], **kwargs: Any) -> AsyncIterator[Any]:
            async for group in super().get_ranges(key, byte_ranges, **kwargs):
                self.counts["get"] += 1  # one batch per underlying request
                self.counts["bytes"] += sum(_nbytes(buffer) for _, buffer in group)
                yield group

        async def _get_many(self, requests: Iterable[tuple[str, Any, Any]]) -> AsyncGenerator[tuple[str, Any], None]:
            for key, prototype, byte_range in requests:  # zarr's default, through our counted get
                yield key, await self.get(key, prototype, byte_range)

        async def exists(self, key: str) -> bool:
            self.counts["head"] += 1
            return await self._store.exists(key)

        async def getsize(self, key: str) -> int:
            self.counts["head"] += 1
            return await self._store.getsize(key)

        async def list(self) -> AsyncIterator[str]:  # type: ignore[override]
            self.counts["list"] += 1
            async for key in self._store.list():
                yield key

        async def list_prefix(self, prefix: str) -> AsyncIterator[str]:  # type: ignore[override]
            self.counts["list"] += 1
            async for key in self._store.list_prefix(prefix):
                yield key

        async def list_dir(self, prefix: str) -> AsyncIterator[str]:  # type: ignore[override]
            self.counts["list"] += 1
            async for key in self._store.list_dir(prefix):
                yield key

    return CountingStore(store, counts)


def _nbytes(buffer: Any) -> int:
    """Bytes of what a store's get returned: a zarr ``Buffer``, raw bytes, or None (a missing key)."""
    if buffer is None:
        return 0
    if hasattr(buffer, "to_bytes"):
        return len(buffer)
    return memoryview(buffer).nbytes
