"""`memo.KeyedValues`, what the search's bounds remember a pointwise read's cell counts in: whatever the order of
additions and lookups, and however its tiers have merged, each key finds the values added with it, and a key
never added is not found."""

from __future__ import annotations

import numpy as np
import pytest

from xarray_zarrmax.advise import memo


@pytest.mark.parametrize("small", [1, 7, 4096])
def test_keyed_values_answer_as_a_dict_does(monkeypatch: pytest.MonkeyPatch, small: int) -> None:
    monkeypatch.setattr(memo, "_SMALL", small)
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


def test_keys_repeated_out_of_order_or_known_are_refused() -> None:
    kept = memo.KeyedValues(1)
    kept.add(np.asarray([3, 9]), np.asarray([[1.0, 2.0]]))
    for keys in ([5, 5], [7, 6], [4, 9]):
        with pytest.raises(ValueError, match="expects new keys, distinct and ascending"):
            kept.add(np.asarray(keys), np.zeros((1, 2)))
    assert len(kept) == 2 and kept.find(np.asarray([9]))[1].tolist() == [[2.0]]
