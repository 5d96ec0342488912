"""Values remembered by integer key and looked up many keys at a time: what lets the search's bounds
(`bounds.SearchBounds`) count a pointwise read's cells once per distinct row of lengths, when a search asks of
millions of rows and adds a few hundred new ones at a time.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from xarray_zarrmax.advise import kernels

#: The small tier is merged into the large one once it holds this fraction of it (and at least `_SMALL` keys):
#: a key is then moved a bounded number of times on average, where keeping one sorted array moved every key on
#: every addition (a search's bounds add a few hundred keys at a time to a few hundred thousand)
_SHARE = 0.125
_SMALL = 4096

#: Slots of a new hash table; it doubles while it would be over half full
_SLOTS = 1024


class KeyedValues:
    """``rows`` float values per distinct int64 key: in a hash table where the kernels are built (`kernels`;
    `_Hashed`: a lookup costs the same however many keys are held), else in two sorted tiers (`_Tiers`). A search
    of scattered points looks up 4 million rows of lengths: the tiers' sort and binary searches were 1.7 s of its
    8.8 s (docs/dev/logs/advise_search_listing_ab.md)."""

    def __init__(self, rows: int) -> None:
        compiled = kernels.compiled
        self._form: _Hashed | _Tiers = _Tiers(rows) if compiled is None else _Hashed(rows, compiled)

    def __len__(self) -> int:
        return len(self._form)

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of ``keys`` (int64, any order, repeats allowed), whether each is known, and the values of each
        (``(rows, keys)``; 0 where not known)."""
        return self._form.find(np.ascontiguousarray(keys, dtype=np.int64))

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Remember ``values`` (``(rows, keys)``) of ``keys``: distinct, ascending, and none known already (a
        key added twice would leave which values it finds to the form's order of search)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        disordered = keys[1:] <= keys[:-1]  # (compared, not subtracted: a difference may pass int64)
        if disordered.any() or self.find(keys)[0].any():
            raise ValueError(f"KeyedValues.add expects new keys, distinct and ascending; got {keys.size} keys, "
                             f"{int(disordered.sum())} out of order or repeated, "
                             f"{int(self.find(keys)[0].sum())} known already")
        self._form.add(keys, np.asarray(values, dtype=np.float64))


class _Hashed:
    """`KeyedValues` in the compiled hash table (`_kernels.c`: hash_find, hash_insert): each key's slot holds its
    place, the place its column of values (and its key, for a larger table)."""

    def __init__(self, rows: int, compiled: ModuleType) -> None:
        self._compiled = compiled  # (kept: a table is read by the kernels that built it, whatever is set later)
        self._table = _empty(_SLOTS)  # per slot a key and its place (-1: empty)
        self._held = np.zeros(0, dtype=np.int64)  # the keys by place
        self._values = np.zeros((rows, 0))
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        places = np.empty(keys.size, dtype=np.int64)
        self._compiled.hash_find(self._table, keys, places)
        found = places >= 0
        if not self._count:
            return found, np.zeros((self._values.shape[0], keys.size))
        # (np.take: 4x a fancy index along the second axis, measured on 7,700 keys of 228,000)
        out = np.take(self._values, np.maximum(places, 0), axis=1)
        if not found.all():
            out[:, ~found] = 0.0
        return found, out

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        count = self._count + keys.size
        if count > self._held.size:  # room for twice as many: each key copied a bounded number of times
            room = max(count, 2 * self._held.size)
            self._held = np.concatenate([self._held[:self._count], np.zeros(room - self._count, dtype=np.int64)])
            grown = np.zeros((self._values.shape[0], room))
            grown[:, :self._count] = self._values[:, :self._count]
            self._values = grown
        if 2 * count > self._table.shape[0]:  # at most half full: a probe soon meets an empty slot
            slots = self._table.shape[0]
            while 2 * count > slots:
                slots *= 2
            self._table = _empty(slots)
            self._compiled.hash_insert(self._table, self._held[:self._count], 0)
        self._compiled.hash_insert(self._table, keys, self._count)
        self._held[self._count:count] = keys
        self._values[:, self._count:count] = values
        self._count = count


def _empty(slots: int) -> np.ndarray:
    """A hash table of ``slots`` empty slots (`_Hashed`): ``(slots, 2)`` int64, a key and its place (-1)."""
    table = np.zeros((slots, 2), dtype=np.int64)
    table[:, 1] = -1
    return table


class _Tiers:
    """`KeyedValues` in numpy (where the kernels were not built): two sorted tiers, a large one and a small one that
    new keys join (a merge of a few hundred into a few thousand) until it is merged into the large one."""

    def __init__(self, rows: int) -> None:
        self._tiers = [(np.zeros(0, dtype=np.int64), np.zeros((rows, 0))) for _ in range(2)]

    def __len__(self) -> int:
        return sum(keys.size for keys, _ in self._tiers)

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = np.zeros(keys.size, dtype=bool)
        out = np.zeros((self._tiers[0][1].shape[0], keys.size))
        for known, values in self._tiers:
            if not known.size:
                continue
            at = np.minimum(np.searchsorted(known, keys), known.size - 1)
            hit = known[at] == keys
            if hit.all():  # (most lookups, once a search has asked of a block's lengths before)
                return hit, np.take(values, at, axis=1)
            found |= hit
            out[:, hit] = np.take(values, at[hit], axis=1)
        return found, out

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
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
