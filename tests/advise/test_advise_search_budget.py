"""The layout search stops at its budgets (`tuning.SEARCH_LAYOUTS`, `tuning.SEARCH_SECONDS`) and says how far it
got: what it did not cost is never predicted faster than the floor it reports."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import xarray as xr

from xarray_zarrmax.advise import advisor
from xarray_zarrmax.advise import search as search_module
from xarray_zarrmax.advise.advisor import advise, search
from xarray_zarrmax.advise.candidates import candidate_layouts
from xarray_zarrmax.advise.model import Costs, Reader

SHAPE, DIMS = (96, 73, 144), ("time", "lat", "lon")
MIX = {"timeseries": 0.5, "map": 0.3, "random-batch": 0.2}


def _search(budget: int | None, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", budget)
    return search(SHAPE, DIMS, 4, MIX, costs=Costs(ratio=0.5, request_s=2e-4, chunk_s=2e-5), reader=Reader())


def _left_of_the_grid(whole: list, part: list) -> list[float]:
    """The scores of the grid's layouts a search that stopped (``part``) left uncosted, from one that did not
    (``whole``). Not the layouts off the grid the whole search's local search found near its fastest: the stopped
    one never got that far, and its floor is of the grid (a local search from the fastest found 12x73x24 in
    12x73x48, 0.1% under the floor of a search stopped after 40 checks)."""
    grid = set(candidate_layouts(SHAPE, 4))
    costed = {c.layout for c in part}
    return [c.score for c in whole if c.layout in grid and c.layout not in costed]


def test_a_search_stopped_at_its_budget_reports_a_floor_nothing_left_beats(monkeypatch):
    whole, complete = _search(None, monkeypatch)
    assert complete is not None and complete.complete
    assert complete.costed > 10  # the budget below stops it early
    part, stopped = _search(10, monkeypatch)
    assert stopped is not None and not stopped.complete and stopped.costed == 10
    left = _left_of_the_grid(whole, part)
    assert left and min(left) >= stopped.floor > 0  # the floor bounds every layout of the grid it left uncosted
    assert min(c.score for c in part) >= min(c.score for c in whole)


def test_the_report_says_whether_the_search_covered_the_grid(monkeypatch):
    ds = xr.Dataset({"v": (DIMS, np.zeros(SHAPE, dtype="f4"))})
    costs = Costs(ratio=0.5, request_s=2e-4, chunk_s=2e-5)
    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", 10)
    assert "search: stopped after 10 layouts of the grid" in str(advise(ds, MIX, costs=costs, progress=False))
    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", None)
    assert "every other one is proven slower" in str(advise(ds, MIX, costs=costs, progress=False))


class _Ticking:
    """A clock that moves one second each time it is read: a search stopped at ``seconds`` has read it that many
    times (its deadline checks), whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _timed(seconds: float | None, monkeypatch: pytest.MonkeyPatch, costs: Costs) -> tuple[list, object, _Ticking]:
    clock = _Ticking()
    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", None)
    monkeypatch.setattr(advisor, "SEARCH_SECONDS", seconds)
    monkeypatch.setattr(advisor, "branch_and_bound", functools.partial(search_module.branch_and_bound, clock=clock))
    ranked, outcome = search(SHAPE, DIMS, 4, MIX, costs=costs, reader=Reader())
    return ranked, outcome, clock


# a wide spread: the second phase (what could tie with the fastest) has work to stop in
_SPREAD = Costs(ratio=0.5, request_s=2e-4, chunk_s=2e-5, spread=(("latency_s", 0.5 * Costs().latency_s,
                                                                   2 * Costs().latency_s), ("request_s", 1e-4, 4e-4)))


@pytest.mark.parametrize("seconds", [1, 5, 40])
def test_a_search_stopped_at_its_time_budget_first_reports_a_floor_nothing_left_beats(monkeypatch, seconds):
    whole, complete, clock = _timed(None, monkeypatch, _SPREAD)
    assert complete is not None and complete.complete and complete.stopped_by == ""
    checks = clock.now - 1  # the deadline was read at the start, then once a check
    assert checks > 40  # the budgets here stop it early
    part, stopped, _ = _timed(seconds, monkeypatch, _SPREAD)
    assert stopped is not None and not stopped.complete and stopped.stopped_by == "seconds"
    assert not stopped.fastest_proven  # (145 checks in all: these stop in the first phase)
    left = _left_of_the_grid(whole, part)
    assert left and min(left) >= stopped.floor > 0  # the floor bounds every layout of the grid it left uncosted
    assert min(c.score for c in part) >= min(c.score for c in whole)


@pytest.mark.parametrize("before_the_end", [2, 4, 8])
def test_a_search_stopped_at_its_time_budget_while_checking_ties_has_proven_the_fastest(monkeypatch, before_the_end):
    """Stopped in its second phase, the fastest is proven, and the floor still bounds every layout of the grid left
    uncosted (also those the first phase listed past its limit and never queued: the next test's case)."""
    whole, complete, clock = _timed(None, monkeypatch, _SPREAD)
    part, stopped, _ = _timed(clock.now - before_the_end, monkeypatch, _SPREAD)  # in the second phase
    assert stopped is not None and not stopped.complete and stopped.stopped_by == "seconds"
    assert stopped.fastest_proven
    assert min(c.score for c in part) == min(c.score for c in whole)
    left = _left_of_the_grid(whole, part)
    assert left and min(left) >= stopped.floor > 0


def test_a_floor_of_the_second_phase_bounds_what_the_first_listed_past_its_limit(monkeypatch):
    """A review's case: stopped at 22 layouts while costing what could tie, under a wide spread. The first phase
    keeps the rows it listed past its limit out of its queue (`search._Rest`); a floor of the queue alone was
    0.0077453, above 14 of the grid's layouts left uncosted (4x8 in 8x24: 0.0075776)."""
    from dataclasses import replace

    from xarray_zarrmax.advise import rank

    from .test_advise_search_proof import _case

    shape, dims, mix, costs, reader = _case(107)
    costs = replace(costs, spread=(("latency_s", costs.latency_s * 0.3, costs.latency_s * 3),
                                   ("request_bps", 2e7, 3e8), ("decode_bps", costs.decode_bps * 0.3,
                                                               costs.decode_bps * 3)))
    monkeypatch.setattr(advisor, "SEARCH_SECONDS", None)
    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", 22)
    part, stopped = search(shape, dims, 4, mix, costs=costs, reader=reader)
    assert stopped is not None and not stopped.complete and stopped.fastest_proven
    costed = {c.layout for c in part}
    left = [lay for lay in candidate_layouts(shape, 4) if lay not in costed]
    scores = [c.score for c in rank(shape, dims, 4, mix, costs=costs, reader=reader, layouts=left)]
    assert scores and min(scores) >= stopped.floor > 0


def test_the_report_says_the_search_stopped_at_its_time_budget(monkeypatch):
    ds = xr.Dataset({"v": (DIMS, np.zeros(SHAPE, dtype="f4"))})
    monkeypatch.setattr(advisor, "SEARCH_SECONDS", 2)
    monkeypatch.setattr(advisor, "branch_and_bound", functools.partial(search_module.branch_and_bound,
                                                                       clock=_Ticking()))
    text = str(advise(ds, MIX, costs=_SPREAD, progress=False))
    assert "search: stopped at its time budget (tuning.SEARCH_SECONDS) after costing" in text
    assert "none of the grid left uncosted is predicted faster than" in text


def test_the_progress_bar_ends_saying_the_search_stopped(monkeypatch):
    calls: list[tuple[int, int, str]] = []
    monkeypatch.setattr(advisor, "SEARCH_SECONDS", 2)
    monkeypatch.setattr(advisor, "branch_and_bound", functools.partial(search_module.branch_and_bound,
                                                                       clock=_Ticking()))
    search(SHAPE, DIMS, 4, MIX, costs=_SPREAD, reader=Reader(), progress=lambda *step: calls.append(step))
    done, total, what = calls[-1]
    assert done == total and what == "stopped: seconds budget"


def test_a_search_out_of_time_before_any_layout_meets_the_constraints_goes_on_to_one(monkeypatch):
    """A task-memory limit is checked as a layout is costed: the least bounded layouts can all break it. A search
    stopped then would answer that no layout meets the constraints (a review found it); the time budget holds
    only once one does."""
    from xarray_zarrmax.advise import Constraints

    monkeypatch.setattr(advisor, "SEARCH_LAYOUTS", None)
    monkeypatch.setattr(advisor, "SEARCH_SECONDS", 1)
    monkeypatch.setattr(advisor, "branch_and_bound", functools.partial(search_module.branch_and_bound,
                                                                       clock=_Ticking()))
    ranked, outcome = search((48, 36, 72), DIMS, 4, {"full-scan": 1.0}, costs=Costs(), reader=Reader(),
                             constraints=Constraints(task_memory_bytes=4000))
    assert outcome is not None and outcome.stopped_by == "seconds" and not outcome.complete
    assert ranked and all(c.task_memory <= 4000 for c in ranked)
