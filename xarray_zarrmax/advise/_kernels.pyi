# The compiled kernels (_kernels.c, built by setup.py where a C compiler is at hand): see advise/kernels.py.
from typing import Any

def gap_counts(boxes: int, read: Any, row: Any, lo: Any, length: Any, stored: Any, grid: Any, last: Any, pieces: Any,
               read_weight: Any, chunk_enc: Any, decoded: Any, compressed: bool, local: bool, gap: int,
               stream_bytes: float, requests: Any, gap_bytes: Any, /) -> None: ...
def first_touches(layouts: int, windows: int, ndim: int, shape: Any, chunks: Any, outer: Any, per_object: Any, lo: Any,
                  hi: Any, starts: Any, stops: Any, span: Any, chunk_enc: Any, index_bytes: Any, fraction: float,
                  compressed: bool, split_size: int, waits: Any, first: Any, ranged_first: Any, whole_extra: Any,
                  parts: Any, splits: Any, /) -> None: ...
def point_components(rows: int, m: int, count: int, lengths: Any, points: Any, extent: Any, full_cells: Any,
                     any_cells: int, partial_all: Any, whole_cells: Any, across: Any, compressed: bool, merged: Any,
                     joined: Any, /) -> None: ...
def point_breaks(layouts: int, ndim: int, count: int, chunks: Any, per: Any, shape: Any, points: Any, chunk_enc: Any,
                 gap: int, fraction: float, compressed: bool, ranked: bool, shards: Any, ranged: Any, breaks: Any,
                 /) -> None: ...
def count_cells(rows: int, m: int, count: int, lengths: Any, points: Any, extent: Any, cells: Any, fraction: Any,
                least: Any, /) -> None: ...
