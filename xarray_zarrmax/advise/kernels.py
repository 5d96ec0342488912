"""The layout search's compiled kernels, where the package was built with them: the one place that knows.

What holds most of a long search's time is compiled: the gaps a read leaves between the chunks it takes from a shard
(`ranged.gap_counts`), the shards a batch's selections touch first (`revisits`), a pointwise read's chunks that
could share a range under any sharding and the breaks between its runs under one (`merges`), the distinct cells
holding its points per distinct cell lengths (`point_bounds`), the table those counts are remembered in (`memo`),
the sharded layouts of many chunk shapes (`candidates.shardings`), their listed bound (`bounds.SearchBounds.
sharded_floor`) and the test of which could tie with the fastest (`search.could_tie`). Each also has a numpy
form, the reference its compiled form (`_kernels.c`) is tested against, and the one used where the package was
installed without a C compiler (setup.py builds the extension as optional): the same counts, the longest searches
slower (1.6x before `merges`, measured; its numpy forms cost more). `in_use` says which a search runs.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

compiled: ModuleType | None
try:
    from xarray_zarrmax.advise import _kernels as compiled
except ImportError:  # installed without a C compiler: the numpy forms
    compiled = None

def in_use() -> str:
    """The kernels a search started now runs: "C" (`_kernels.c`), or "numpy" (not built, or set aside as the
    tests do)."""
    return "numpy" if compiled is None else "C"


def ints(a: np.ndarray) -> np.ndarray:
    """``a`` as the compiled kernels read an integer array: C-contiguous int64 (a copy only where it is not)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def floats(a: np.ndarray) -> np.ndarray:
    """``a`` as the compiled kernels read a real array: C-contiguous float64 (a copy only where it is not)."""
    return np.ascontiguousarray(a, dtype=np.float64)
