"""The read layouts of seed 000 (issue "Throughput"), written with zarr-python: what the read and write tables,
the decoder table, the asv read and write benchmarks and the experiments all read and write.

1-D int64 random data (incompressible, zstd) in 0.8, 3 and 12.5 MB chunks, and 1 MB chunks in 64 MB shards; a
3-D float32 (time, lat, lon) cube of smooth data with zstd in 64 MB shards. Every array is the variable "v" of
a Zarr v3 group; its values are the same in every run (seeded).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Layout:
    name: str
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    smooth: bool = False

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize

    def data(self) -> np.ndarray:
        rng = np.random.default_rng(1)
        if not self.smooth:
            return rng.integers(0, 2**63 - 1, self.shape, dtype=self.dtype)
        nt, ny, nx = self.shape
        lat = np.linspace(-np.pi / 2, np.pi / 2, ny, dtype="f4")[None, :, None]
        lon = np.linspace(0, 2 * np.pi, nx, dtype="f4")[None, None, :]
        t = np.arange(nt, dtype="f4")[:, None, None]
        cube = 273.0 + 30 * np.cos(lat) + 5 * np.sin(lon + t / 24) + np.cos(3 * lat + t / 100)
        noise = rng.normal(scale=0.05, size=(1, ny, nx)).astype("f4")
        return (cube + noise).astype(self.dtype)


def layouts(mib: int) -> list[Layout]:
    """Every layout at ``mib`` MiB an array (the cube: at least 64 time steps)."""
    n = mib * 2**20 // 8
    cube_t = max(mib * 2**20 // (512 * 512 * 4), 64)
    return [
        Layout("int64, 0.8 MB chunks", (n,), "i8", (100_000,), None),
        Layout("int64, 3 MB chunks", (n,), "i8", (375_000,), None),
        Layout("int64, 12.5 MB chunks", (n,), "i8", (1_562_500,), None),
        Layout("int64, 1 MB chunks in 64 MB shards", (n,), "i8", (131_072,), (8_388_608,)),
        Layout("float32 cube, 4 MB chunks in 64 MB shards", (cube_t, 512, 512), "f4", (16, 256, 256),
               (64, 512, 512), smooth=True),
    ]


def indexes(text: str) -> list[int]:
    """A ``--layouts`` flag's comma-separated indexes into `layouts` (empty: none chosen)."""
    return [int(i) for i in text.split(",") if i]


def chosen(mib: int, text: str) -> list[tuple[int, Layout]]:
    """The layouts a ``--layouts`` flag names, with their indexes; every layout when it names none."""
    every = list(enumerate(layouts(mib)))
    return [every[i] for i in indexes(text)] if text else every


def write(store: Any, layout: Layout) -> None:
    """The layout's data as the array "v" of a new Zarr v3 group at ``store`` (zstd level 1), by zarr-python."""
    import zarr
    from zarr.codecs import ZstdCodec

    dims = ["time", "lat", "lon"][: len(layout.shape)] if layout.smooth else ["x"]
    group = zarr.open_group(store, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=layout.shape, dtype=layout.dtype, chunks=layout.chunks,
                             shards=layout.shards, compressors=[ZstdCodec(level=1)], dimension_names=dims)
    arr[...] = layout.data()


def local_copies(mib: int, which: Sequence[int], prefix: str) -> Iterator[tuple[Layout, Path]]:
    """Each layout of ``which`` written to a local directory in turn, the next one only once the caller asks
    for it (one array on disk beside the page cache at a time, as each experiment measures it); all removed
    at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for index in which:
            layout = layouts(mib)[index]
            path = Path(tmp) / f"layout{index}.zarr"
            write(str(path), layout)
            yield layout, path
