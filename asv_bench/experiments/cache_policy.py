"""Which chunks to evict: hit rates of least-recently-used (the decoded-chunk cache's), first-in-first-out, random
and the clairvoyant optimum (Belady: evict the chunk needed furthest in the future) on the chunk traces of the
cache table's workloads (`asv_bench.shared.cache_workloads`), at caps of a quarter, half and all of the 32
chunks the cube has (the training array's epochs: 128 chunks, of which the windows touch most). No I/O:
each read is the set of chunks it touches, in order.

    .venv/bin/python -m asv_bench.experiments.cache_policy
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np

from asv_bench.shared import cache_workloads as w

Chunk = tuple[int, int, int]


def _chunks(start: tuple[int, ...], stop: tuple[int, ...], chunks: tuple[int, ...] = w.CHUNKS) -> list[Chunk]:
    ranges = [range(a // c, (b - 1) // c + 1) for a, b, c in zip(start, stop, chunks, strict=True)]
    return list(itertools.product(*ranges))  # type: ignore[arg-type]


def traces() -> dict[str, list[Chunk]]:
    nt, ny, nx = w.SHAPE
    out: dict[str, list[Chunk]] = {}
    for rows in w.SLABS:
        out[f"slabs-{rows}"] = [c for t in range(0, nt, rows) for c in _chunks((t, 0, 0), (t + rows, ny, nx))]
    out["rolling"] = [c for t in range(0, nt - 10, 3) for c in _chunks((t, 0, 0), (t + 10, ny, nx))]
    starts = w.windows()
    epochs = []
    for seed in (1, 2, 3):
        order = np.random.default_rng(seed).permutation(len(starts))
        for i in order:
            t, y, x = starts[i]
            epochs += _chunks((t, y, x), (t + w.WINDOW[0], y + w.WINDOW[1], x + w.WINDOW[2]), w.TRAIN_CHUNKS)
    out["3 epochs"] = epochs
    rng = np.random.default_rng(11)
    times = rng.choice(nt, size=50, replace=False)
    out["interactive"] = [c for t in rng.permutation(times.repeat(3)) for c in _chunks((int(t), 0, 0),
                                                                                           (int(t) + 1, ny, nx))]
    return out


def lru(trace: list[Chunk], cap: int) -> int:
    kept: OrderedDict[Chunk, None] = OrderedDict()
    hits = 0
    for c in trace:
        if c in kept:
            hits += 1
            kept.move_to_end(c)
            continue
        kept[c] = None
        if len(kept) > cap:
            kept.popitem(last=False)
    return hits


def fifo(trace: list[Chunk], cap: int) -> int:
    kept: OrderedDict[Chunk, None] = OrderedDict()
    hits = 0
    for c in trace:
        if c in kept:
            hits += 1
            continue
        kept[c] = None
        if len(kept) > cap:
            kept.popitem(last=False)
    return hits


def random_evict(trace: list[Chunk], cap: int) -> int:
    rng = random.Random(0)
    kept: list[Chunk] = []
    hits = 0
    for c in trace:
        if c in kept:
            hits += 1
            continue
        if len(kept) >= cap:
            kept.pop(rng.randrange(len(kept)))
        kept.append(c)
    return hits


def belady(trace: list[Chunk], cap: int) -> int:
    def next_use(i: int) -> Iterator[tuple[int, Chunk]]:
        for c in kept:
            j = next((k for k in range(i + 1, len(trace)) if trace[k] == c), len(trace))
            yield j, c

    kept: set[Chunk] = set()
    hits = 0
    for i, c in enumerate(trace):
        if c in kept:
            hits += 1
            continue
        if len(kept) >= cap:
            kept.discard(max(next_use(i))[1])
        kept.add(c)
    return hits


def main() -> None:
    policies = {"LRU": lru, "FIFO": fifo, "random": random_evict, "optimum (Belady)": belady}
    print("Hits / chunk reads (higher is better); the cube has 32 chunks, the training array 128.\n")
    print("| workload | reads | cap (chunks) | " + " | ".join(policies) + " |")
    print("|---|---|---|" + "---|" * len(policies))
    for name, trace in traces().items():
        for cap in ((32, 64, 128) if name == "3 epochs" else (8, 16, 32)):
            cells = " | ".join(f"{fn(trace, cap) / len(trace):.2f}" for fn in policies.values())
            print(f"| {name} | {len(trace)} | {cap} | {cells} |")


if __name__ == "__main__":
    main()
