"""`memo.KeyedValues`, what the search's bounds remember a pointwise read's cell counts in: whatever the order of
additions and lookups, and however its table has grown (compiled: `_kernels.c`'s hash) or its tiers have merged
(numpy), each key finds the values added with it, and a key never added is not found."""

from __future__ import annotations

import numpy as np
import pytest

from xarray_zarrmax.advise import kernels, memo


@pytest.mark.parametrize("small", [1, 7, 4096])
def test_keyed_values_answer_as_a_dict_does(monkeypatch: pytest.MonkeyPatch, bound_kernels: str, small: int) -> None:
    monkeypatch.setattr(memo, "_SMALL", small)
    monkeypatch.setattr(memo, "_SLOTS", 2 if small == 1 else 1024)  # the hash table grown many times over
    rng = np.random.default_rng(small)
    kept = memo.KeyedValues(3)
    truth: dict[int, tuple[float, ...]] = {}
    for _ in range(300):
        asked = rng.integers(-(2**62), 2**62, int(rng.integers(0, 50)))
        asked = np.concatenate([asked, rng.choice(np.asarray(list(truth) or [0], dtype=np.int64), 20)])
        found, values = kept.find(asked)
        assert found.tolist() == [int(k) in truth for k in asked]
        for key, hit, column in zip(asked.tolist(), found, values.T, strict=True):
            assert tuple(column) == (truth[key] if hit else (0.0, 0.0, 0.0))
        new = np.unique(asked[~found])
        added = rng.normal(size=(3, new.size))
        kept.add(new, added)
        truth.update({int(k): tuple(v) for k, v in zip(new, added.T, strict=True)})
        assert len(kept) == len(truth)


def test_keys_colliding_in_the_hash_are_told_apart(bound_kernels: str) -> None:
    """Keys a multiple of a large power of two apart (the search's mixed-radix codes differ so) share the hash's
    low bits: each still finds its own values."""
    kept = memo.KeyedValues(1)
    keys = np.arange(5000, dtype=np.int64) << 40
    kept.add(keys, keys[None].astype(np.float64))
    found, values = kept.find(keys[::-1])
    assert found.all() and values[0].tolist() == keys[::-1].astype(np.float64).tolist()
    assert not kept.find(keys + 1)[0].any()


def test_keys_repeated_out_of_order_or_known_are_refused(bound_kernels: str) -> None:
    kept = memo.KeyedValues(1)
    kept.add(np.asarray([3, 9]), np.asarray([[1.0, 2.0]]))
    for keys in ([5, 5], [7, 6], [4, 9]):
        with pytest.raises(ValueError, match="expects new keys, distinct and ascending"):
            kept.add(np.asarray(keys), np.zeros((1, 2)))
    assert len(kept) == 2 and kept.find(np.asarray([9]))[1].tolist() == [[2.0]]


@pytest.mark.skipif(kernels.compiled is None, reason="the compiled hash was not built here (numpy tiers in use)")
def test_the_compiled_hash_refuses_a_held_key_and_a_bad_table_and_keeps_its_table() -> None:
    assert kernels.compiled is not None
    table = memo._empty(8)
    kernels.compiled.hash_insert(table, np.asarray([11, 12], dtype=np.int64), 0)
    before = table.copy()
    with pytest.raises(ValueError, match="key 12 is held already"):
        kernels.compiled.hash_insert(table, np.asarray([13, 12], dtype=np.int64), 2)
    assert (table == before).all()  # 13 was placed, then taken out again
    with pytest.raises(ValueError, match="key 14 is held already"):
        kernels.compiled.hash_insert(table, np.asarray([14, 14], dtype=np.int64), 2)
    assert (table == before).all()
    full = memo._empty(2)
    kernels.compiled.hash_insert(full, np.asarray([1, 2], dtype=np.int64), 0)
    with pytest.raises(ValueError, match="no empty slot left of 2"):
        kernels.compiled.hash_insert(full, np.asarray([3], dtype=np.int64), 2)
    places = np.empty(1, dtype=np.int64)
    kernels.compiled.hash_find(full, np.asarray([3], dtype=np.int64), places)  # a full table: the probe ends
    assert places.tolist() == [-1]
    for bad in (np.zeros((3, 2), dtype=np.int64), np.zeros((1, 2), dtype=np.int64)):
        with pytest.raises(ValueError, match="expected 16 times a power of two"):
            kernels.compiled.hash_find(bad, np.asarray([3], dtype=np.int64), places)
    with pytest.raises(ValueError, match="hash_find: out"):
        kernels.compiled.hash_find(table, np.asarray([3, 4], dtype=np.int64), places)
    with pytest.raises(ValueError, match="the first place is -1"):
        kernels.compiled.hash_insert(table, np.asarray([20], dtype=np.int64), -1)


def test_keys_further_apart_than_int64_holds_are_taken_in_order(bound_kernels: str) -> None:
    """Ascending keys whose difference passes 2^63 (an adversarial review's case: the order was checked by a difference,
    which wrapped) are taken, and found."""
    kept = memo.KeyedValues(1)
    keys = np.asarray([-(2**62) - 1, 2**62], dtype=np.int64)
    kept.add(keys, np.asarray([[1.0, 2.0]]))
    found, values = kept.find(keys)
    assert found.all() and values.tolist() == [[1.0, 2.0]]
