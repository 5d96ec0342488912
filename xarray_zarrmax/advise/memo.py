"""Values remembered by integer key and looked up many keys at a time, in numpy: what lets the search's bounds
(`bounds.SearchBounds`) count a pointwise read's cells once per distinct row of lengths, when a search asks of
millions of rows and adds a few hundred new ones at a time.
"""

from __future__ import annotations

import numpy as np

#: The small tier is merged into the large one once it holds this fraction of it (and at least `_SMALL` keys):
#: a key is then moved a bounded number of times on average, where keeping one sorted array moved every key on
#: every addition (a search's bounds add a few hundred keys at a time to a few hundred thousand)
_SHARE = 0.125
_SMALL = 4096


class KeyedValues:
    """``rows`` float values per distinct int64 key, in two sorted tiers: a large one, and a small one that new
    keys join (a merge of a few hundred into a few thousand) until it is merged into the large one."""

    def __init__(self, rows: int) -> None:
        self._tiers = [(np.zeros(0, dtype=np.int64), np.zeros((rows, 0))) for _ in range(2)]

    def __len__(self) -> int:
        return sum(keys.size for keys, _ in self._tiers)

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of ``keys`` (int64, any order), whether each is known, and the values of each (``(rows, keys)``; 0
        where not known)."""
        found = np.zeros(keys.size, dtype=bool)
        out = np.zeros((self._tiers[0][1].shape[0], keys.size))
        for known, values in self._tiers:
            if not known.size:
                continue
            at = np.minimum(np.searchsorted(known, keys), known.size - 1)
            hit = known[at] == keys
            if hit.all():  # (most lookups, once a search has asked of a block's lengths before)
                return hit, values[:, at]
            found |= hit
            out[:, hit] = values[:, at[hit]]
        return found, out

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Remember ``values`` (``(rows, keys)``) of ``keys``: distinct, ascending, and none known already (a
        key in both tiers would make `find` answer from whichever it searched first)."""
        if (np.diff(keys) <= 0).any() or self.find(keys)[0].any():
            raise ValueError(f"KeyedValues.add expects new keys, distinct and ascending; got {keys.size} keys, "
                             f"{int((np.diff(keys) <= 0).sum())} out of order or repeated, "
                             f"{int(self.find(keys)[0].sum())} known already")
        small = _merged(*self._tiers[1], keys, values)
        large = self._tiers[0]
        if small[0].size >= max(_SMALL, _SHARE * large[0].size):
            self._tiers = [_merged(*large, *small), (large[0][:0], large[1][:, :0])]
        else:
            self._tiers[1] = small


def _merged(known: np.ndarray, values: np.ndarray, more: np.ndarray,
            more_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two ascending arrays of distinct keys (``known``, ``more``) merged into one, with their ``(rows, n)``
    values: each entry's place is its own plus the entries of the other array before it."""
    place = np.searchsorted(known, more)  # each new key goes before the known key there
    at_known = np.arange(known.size) + np.cumsum(np.bincount(place, minlength=known.size + 1))[:known.size]
    at_more = np.arange(more.size) + place
    keys = np.empty(known.size + more.size, dtype=np.int64)
    keys[at_known], keys[at_more] = known, more
    merged = np.empty((values.shape[0], keys.size))
    merged[:, at_known], merged[:, at_more] = values, more_values
    return keys, merged
