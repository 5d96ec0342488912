"""The layout search stops at its budget (`tuning.SEARCH_LAYOUTS`) and says how far it got: what it did not cost
is never predicted faster than the floor it reports."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from xarray_zarrmax.advise import advisor
from xarray_zarrmax.advise.advisor import advise, search
from xarray_zarrmax.advise.model import Costs, Reader

SHAPE, DIMS = (96, 73, 144), ("time", "lat", "lon")
MIX = {"timeseries": 0.5, "map": 0.3, "random-batch": 0.2}


def _search(budget: int | None, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", budget)
    return search(SHAPE, DIMS, 4, MIX, costs=Costs(ratio=0.5, request_s=2e-4, chunk_s=2e-5), reader=Reader())


def test_a_search_stopped_at_its_budget_reports_a_floor_nothing_left_beats(monkeypatch):
    whole, complete = _search(None, monkeypatch)
    assert complete is not None and complete.complete
    assert complete.costed > 10  # the budget below stops it early
    part, stopped = _search(10, monkeypatch)
    assert stopped is not None and not stopped.complete and stopped.costed == 10
    costed = {c.layout for c in part}
    left = [c.score for c in whole if c.layout not in costed]
    assert left and min(left) >= stopped.floor > 0  # the floor bounds every layout it left uncosted
    assert min(c.score for c in part) >= min(c.score for c in whole)


def test_the_report_says_whether_the_search_covered_the_grid(monkeypatch):
    ds = xr.Dataset({"v": (DIMS, np.zeros(SHAPE, dtype="f4"))})
    costs = Costs(ratio=0.5, request_s=2e-4, chunk_s=2e-5)
    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", 10)
    assert "search: stopped after 10 layouts of the grid" in str(advise(ds, MIX, costs=costs, progress=False))
    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", None)
    assert "every other one is proven slower" in str(advise(ds, MIX, costs=costs, progress=False))
