"""The advisor's validation script (`asv_bench.tables.advise_validation`) in pieces, on tiny data: its statistics
on toy cases worked by hand, and one dataset written, read, counted and predicted locally. No timing asserted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from asv_bench.shared.access import Spec, Store
from asv_bench.shared.advise_sets import B_QUICK_SHAPE, datasets, expected, run_pattern, write
from asv_bench.tables.advise_validation import (
    Advisor,
    counted,
    pick_ratio,
    ranks,
    request_differences,
    spearman,
    timed,
    weighted,
)


def test_ranks_share_ties() -> None:
    assert ranks([10.0, 2.0, 2.0, 7.0]).tolist() == [4.0, 1.5, 1.5, 3.0]


def test_spearman_on_toy_cases() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # two neighbours swapped twice: sum d^2 = 4, so 1 - 6 * 4 / (5 * 24) = 0.8
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # ties take mean ranks: Pearson's on [1, 2.5, 2.5, 4] and [1, 2, 3, 4] = 0.9486...
    assert spearman([1, 2, 2, 3], [5, 6, 7, 8]) == pytest.approx(3 / math.sqrt(10))
    assert math.isnan(spearman([1, 2], [1, 2]))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="one length"):
        spearman([1, 2, 3], [1, 2])


def test_request_comparison_lists_each_difference() -> None:
    predicted = {("a", "map"): 4, ("a", "series"): 10, ("b", "map"): 1}
    assert request_differences(predicted, {("a", "map"): 4, ("a", "series"): 12, ("b", "map"): 1}) == [
        (("a", "series"), 10, 12)]
    assert request_differences(predicted, dict(predicted)) == []


def test_mix_scores_and_pick_ratio() -> None:
    times = {"fast": {"map": 1.0, "series": 3.0}, "slow": {"map": 2.0, "series": 4.0}}
    mix = {"map": 0.25, "series": 0.75}
    scores = {k: weighted(t, mix) for k, t in times.items()}
    assert scores == {"fast": pytest.approx(2.5), "slow": pytest.approx(3.5)}
    assert pick_ratio(scores, "slow") == pytest.approx(1.4)
    assert pick_ratio(scores, "fast") == 1.0


def test_both_sets_are_kept_apart_with_three_new_mixes_each() -> None:
    sets = datasets(quick=True)
    first = [d for d in sets if d.validation_set == 1]
    held_out = [d for d in sets if d.validation_set == 2]
    assert len(first) == 1 and len(held_out) >= 2
    seen = {name for mix in first[0].mixes.values() for name in mix}
    for d in held_out:
        assert len(d.mixes) == 3
        assert not seen & {name for mix in d.mixes.values() for name in mix}
        assert len(d.dims) != 3 and 6 <= len(d.layouts) <= 10
    assert {"points", "boxes", "batch"} <= {p.kind for d in held_out for p in d.patterns}


def test_a_tiny_dataset_written_read_counted_and_predicted(tmp_path: Path) -> None:
    """The script's pieces end to end on a tiny station dataset, local only: the reads return the data, and for
    single boxes of an unsharded layout (the reader's simplest case, and the model's) the advisor's predicted
    GET requests are the counted ones."""
    from xarray_zarrmax.advise import Costs

    data = next(d for d in datasets(quick=True) if d.name == "stations-2d")
    assert data.shape == B_QUICK_SHAPE
    ds, encoding, values = data.make()
    spec = Spec("tiny", (240, 16), None, "hand")
    write(tmp_path / spec.key, spec, ds, encoding)
    advisor = Advisor()
    patterns = [p for p in data.patterns if p.kind != "batch"]
    batch = next(p for p in data.patterns if p.kind == "batch")
    windows = advisor.batch_windows(data, batch)
    assert batch.batch is not None
    assert len(windows) == batch.batch["windows"] and all(set(w) == set(data.dims) for w in windows)
    store = Store("local", tmp_path)
    for p in patterns:
        want = expected(values, data.dims, p)
        assert all(np.array_equal(a, b) for a, b in zip(run_pattern(store.open(spec, "zarrmax"), p), want,
                                                        strict=True))
        assert counted(store, spec, p, want, atol=0.0)[0] >= 1
        assert timed(store, spec, p) > 0
    user_ds = store.open(spec, "zarrmax")
    box_only = type(data)(**{**data.__dict__, "patterns": patterns})
    predicted = advisor.predict(user_ds, box_only, [spec], Costs())
    for p in patterns:
        if p.kind == "box":
            requests, nbytes = counted(store, spec, p, expected(values, data.dims, p), atol=0.0)
            assert predicted[(spec.key, p.name)]["requests"] == requests and nbytes > 0
        assert predicted[(spec.key, p.name)]["seconds"] > 0


def test_the_search_time_table_lists_every_case_and_formats_its_rows() -> None:
    """`asv_bench.tables.advise_search_time`: every built-in pattern on the 4-D array, every pattern and mix of
    both sets; a row per case and costs in its table."""
    from asv_bench.tables.advise_search_time import BUILT_IN, cases, markdown, point_cases

    found = cases()
    assert [c["case"] for c in found if c["array"] == "4-D built-in"] == list(BUILT_IN)
    pointwise = point_cases([5, 40])  # ``--points 5 40``: N distinct points, along every dimension and along two
    assert [c["case"] for c in pointwise] == ["5 random points", "profiles at 5 points", "40 random points",
                                             "profiles at 40 points"]
    for c in pointwise:
        indices = c["patterns"][c["case"]][1].indices
        cells = np.stack([indices[d] for d in c["dims"] if d in indices], axis=1)
        assert len(np.unique(cells, axis=0)) == int(c["case"].split()[-2 if "profiles" in c["case"] else 0])
    names = {(c["array"], c["case"]) for c in found}
    assert ("set 2 packed-4d", "mix training") in names and ("set 1 geosfp-like", "mix balanced") in names
    row = {"array": "4-D built-in", "case": "map", "costs": "minio", "seconds": 0.25, "costed": 12,
           "complete": True, "best": "1x5x181x360"}
    text = markdown({"command": "c", "repeat": 3, "machine_before": {"load_average": [1.0]},
                     "machine_after": {"load_average": [2.0]}, "rows": [row]})
    assert "| 4-D built-in | map | minio | 0.25 | 12 | yes | 1x5x181x360 |" in text


def test_the_search_ab_table_summarizes_both_checkouts_runs() -> None:
    """`asv_bench.tables.advise_search_ab`: medians and their ratio per case, and whether the picks agree."""
    from asv_bench.tables.advise_search_ab import markdown, summary

    before = [{"seconds": s, "costed": 10, "best": "4x4", "score": 0.5} for s in (3.0, 4.0, 9.0)]
    after = [{"seconds": s, "costed": 9, "best": "4x4", "score": 0.5} for s in (1.0, 2.0, 1.5)]
    row = summary("a / b / minio", before, after)
    assert (row["before_s"], row["after_s"], row["ratio"], row["same_pick"]) == (4.0, 1.5, 4.0 / 1.5, True)
    assert not summary("a / b / minio", before, [{**after[0], "best": "2x4"}])["same_pick"]
    text = markdown({"command": "c", "other": "/tmp/before", "repeat": 3, "machine_before": {"load_average": [1.0]},
                     "machine_after": {"load_average": [2.0]}, "rows": [row]})
    assert "| a / b / minio | 4.00 | 1.50 | 2.67x | 10 / 9 | yes |" in text


def test_the_search_ab_hands_a_pointwise_case_to_a_checkout_as_plain_lists(tmp_path: Path) -> None:
    """`advise_search_ab --points N`: a case of `advise_search_time.point_cases` is written as JSON for checkouts
    that have no such cases; any other case is left to the checkout's own table."""
    from asv_bench.tables.advise_search_ab import point_case_file
    from asv_bench.tables.advise_search_time import point_cases

    path = point_case_file([4, 7], "4-D built-in / profiles at 7 points / minio", tmp_path)
    assert path is not None
    given = json.loads(path.read_text())
    expected = next(c for c in point_cases([7]) if c["case"] == "profiles at 7 points")
    assert (given["case"], given["shape"], given["dims"]) == ("profiles at 7 points", [365, 10, 181, 360],
                                                             ["time", "lev", "lat", "lon"])
    assert given["indices"] == {d: ix.tolist() for d, ix in expected["patterns"][given["case"]][1].indices.items()}
    assert point_case_file([4, 7], "4-D built-in / map / minio", tmp_path) is None
    assert point_case_file([4], "4-D built-in / profiles at 7 points / minio", tmp_path) is None
