# The compiled kernels (_kernels.c, built by setup.py where a C compiler is at hand): see advise/kernels.py.
from typing import Any

def gap_counts(boxes: int, read: Any, row: Any, lo: Any, length: Any, stored: Any, grid: Any, last: Any, pieces: Any,
               read_weight: Any, chunk_enc: Any, decoded: Any, compressed: bool, local: bool, gap: int,
               stream_bytes: float, requests: Any, gap_bytes: Any, /) -> None: ...
def first_touches(layouts: int, windows: int, ndim: int, shape: Any, chunks: Any, outer: Any, per_object: Any, lo: Any,
                  hi: Any, starts: Any, stops: Any, span: Any, chunk_enc: Any, index_bytes: Any, fraction: float,
                  compressed: bool, split_size: int, waits: Any, first: Any, ranged_first: Any, whole_extra: Any,
                  parts: Any, splits: Any, /) -> None: ...
