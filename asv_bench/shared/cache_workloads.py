"""The decoded-chunk cache's workloads (issue 43), shared by the table (`asv_bench.tables.chunk_cache`) and the
asv suite (`benchmarks/cache.py`): one 3-D float32 cube, read the ways that decode the same chunks again.

- ``slabs-T``: the cube in slabs of T time steps, first to last (zarr-python #4306: a chunk is 32 steps thick,
  so a 1-step slab decodes 32 times the chunks a 32-step one does, without a cache);
- ``rolling``: means over windows of 10 steps moved by 3 (they overlap, and do not align with chunks);
- ``epoch-1`` / ``epochs-2-3``: 32 random (16, 160, 160) training windows (1.6 MB each, up to 16 chunks of
  256 KiB decoded) of a second array ``w`` (128 x 256 x 256), in batches of 8 read at once (a data loader's
  threads), the same windows each epoch in another order: the first epoch against the mean of the next two;
- ``interactive``: maps at 50 random times, in random order, each seen three times.

Every read is checked against the data written (the first and last of each workload, and a checksum of all).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

SHAPE, CHUNKS, SHARDS = (256, 128, 128), (32, 64, 64), (32, 128, 128)  # 512 KiB chunks, 2 MiB shards, 16 MiB
SLABS = (64, 16, 4, 1)
# the training array: 256 KiB chunks, 4 MiB shards, 32 MiB
TRAIN_SHAPE, TRAIN_CHUNKS, TRAIN_SHARDS = (128, 256, 256), (16, 64, 64), (16, 256, 256)
WINDOW, BATCH, EPOCH = (16, 160, 160), 8, 32


def cube(shape: tuple[int, int, int] = SHAPE) -> np.ndarray:
    """Smooth data (about 3x with zstd), the same in every run."""
    t = np.arange(shape[0], dtype="f4")[:, None, None]
    y = np.linspace(0, np.pi, shape[1], dtype="f4")[None, :, None]
    x = np.linspace(0, 2 * np.pi, shape[2], dtype="f4")[None, None, :]
    noise = np.random.default_rng(7).normal(scale=0.01, size=shape).astype("f4")
    return (280 + 10 * np.sin(y) * np.cos(x + t / 30) + noise).astype("f4")


def train() -> np.ndarray:
    return cube(TRAIN_SHAPE)


def write(store: Any, data: np.ndarray, training: np.ndarray) -> None:
    """``data`` as array ``v`` (t, y, x) and ``training`` as ``w`` (s, p, q) of one group."""
    import zarr
    from zarr.codecs import ZstdCodec

    group = zarr.open_group(store, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="f4",
                             compressors=[ZstdCodec(level=3)], dimension_names=["t", "y", "x"])
    arr[:] = data
    arr = group.create_array("w", shape=TRAIN_SHAPE, chunks=TRAIN_CHUNKS, shards=TRAIN_SHARDS, dtype="f4",
                             compressors=[ZstdCodec(level=3)], dimension_names=["s", "p", "q"])
    arr[:] = training


def _check(name: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{name}: wrong values (shape {got.shape}, expected {want.shape})")


def slabs(v: Any, data: np.ndarray, rows: int) -> float:
    total = 0.0
    for t in range(0, SHAPE[0], rows):
        got = v.isel(t=slice(t, t + rows)).values
        if t in (0, SHAPE[0] - rows):
            _check(f"slabs-{rows}", got, data[t:t + rows])
        total += float(got[0, 0, 0])
    return total


def rolling(v: Any, data: np.ndarray) -> float:
    means = [v.isel(t=slice(t, t + 10)).values.mean(axis=0) for t in range(0, SHAPE[0] - 10, 3)]
    _check("rolling", means[-1], data[(SHAPE[0] - 11) // 3 * 3:][:10].mean(axis=0))
    return float(sum(m[0, 0] for m in means))


def windows(seed: int = 3) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    return [tuple(int(rng.integers(0, n - w + 1)) for n, w in zip(TRAIN_SHAPE, WINDOW, strict=True))  # type: ignore[misc]
            for _ in range(EPOCH)]


def epoch(v: Any, data: np.ndarray, starts: list[tuple[int, int, int]], order_seed: int) -> float:
    order = np.random.default_rng(order_seed).permutation(len(starts))

    def one(i: int) -> np.ndarray:
        s, y, x = starts[i]  # the training array's dimensions are (s, p, q)
        return v.isel(s=slice(s, s + WINDOW[0]), p=slice(y, y + WINDOW[1]), q=slice(x, x + WINDOW[2])).values

    total = 0.0
    with ThreadPoolExecutor(BATCH) as pool:
        for b in range(0, len(order), BATCH):
            got = list(pool.map(one, order[b:b + BATCH]))
            total += sum(float(g.sum()) for g in got)
            t, y, x = starts[order[b]]
            _check("epoch", got[0], data[t:t + WINDOW[0], y:y + WINDOW[1], x:x + WINDOW[2]])
    return total


def interactive(v: Any, data: np.ndarray) -> float:
    rng = np.random.default_rng(11)
    times = rng.choice(SHAPE[0], size=50, replace=False)
    visits = rng.permutation(np.repeat(times, 3))
    total = 0.0
    for t in visits:
        got = v.isel(t=int(t)).values
        total += float(got[0, 0])
    _check("interactive", got, data[int(visits[-1])])
    return total


def run_all(open_ds: Callable[[], Any], data: np.ndarray, training: np.ndarray,
            after_each: Callable[[str], None]) -> dict[str, float]:
    """Every workload on a Dataset from ``open_ds`` (one open per workload: a new session), timed;
    ``after_each(name)`` is called after each (to read counters)."""
    seconds: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> None:
        start = time.perf_counter()
        fn()
        seconds[name] = time.perf_counter() - start
        after_each(name)

    for rows in SLABS:
        v = open_ds()["v"]
        timed(f"slabs-{rows}", lambda v=v, rows=rows: slabs(v, data, rows))
    v = open_ds()["v"]
    timed("rolling", lambda: rolling(v, data))
    w = open_ds()["w"]
    starts = windows()
    timed("epoch-1", lambda: epoch(w, training, starts, 1))
    timed("epoch-2", lambda: epoch(w, training, starts, 2))
    timed("epoch-3", lambda: epoch(w, training, starts, 3))
    v = open_ds()["v"]
    timed("interactive", lambda: interactive(v, data))
    return seconds
