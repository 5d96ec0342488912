"""The conformance harness itself (tests/conformance): the comparison fails on every undeclared difference and
on stale deliberate entries, and the routing sends engine="zarr" reads to zarrmax while writes stay with zarr."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.conformance import routing, run
from tests.conformance.run import Deliberate, compare, counts, load_deliberate, report


def outcome(name: str, message: str = "", reads: int = 1) -> dict[str, object]:
    return {"outcome": name, "message": message, "reads": reads}


CONTROL = {
    "a": outcome("passed"),
    "b": outcome("passed"),
    "c[1]": outcome("passed"),
    "c[2]": outcome("passed"),
    "d": outcome("failed", "broken in both"),
    "e": outcome("skipped", reads=0),
    "f": outcome("failed", "broken in the control only"),
}
ZARRMAX = {
    "a": outcome("passed"),
    "b": outcome("failed", "AssertionError: not identical"),
    "c[1]": outcome("failed", "Expected 'getitem' to have been called"),
    "c[2]": outcome("error", "Expected 'getitem' to have been called"),
    "d": outcome("failed", "broken in both"),
    "e": outcome("skipped", reads=0),
    "f": outcome("passed"),
}


def test_an_undeclared_difference_fails():
    result = compare(CONTROL, ZARRMAX, [Deliberate(("c[[]*",), "patches zarr internals")])
    assert not result.ok
    assert list(result.undeclared) == ["b"]
    assert set(result.deliberate) == {"c[1]", "c[2]"}
    assert result.better == ["f"]  # noted, never a failure


def test_every_difference_declared_passes():
    result = compare(CONTROL, ZARRMAX, [Deliberate(("b",), "a choice"), Deliberate(("c*",), "internals")])
    assert result.ok and not result.undeclared and not result.stale


def test_a_stale_deliberate_pattern_fails():
    entries = [Deliberate(("b", "c*", "a"), "one pattern, 'a', names a test that passes")]
    result = compare(CONTROL, ZARRMAX, entries)
    assert not result.ok and result.stale == ["a"] and not result.undeclared


def test_a_pattern_naming_no_test_is_stale_unless_the_run_was_a_selection():
    entries = [Deliberate(("b", "c*", "test_gone_from_xarray*"), "x")]
    assert compare(CONTROL, ZARRMAX, entries).stale == ["test_gone_from_xarray*"]
    assert compare(CONTROL, ZARRMAX, entries, partial=True).ok
    # in a selection, a pattern naming a test that ran and no longer differs is still stale
    assert compare(CONTROL, ZARRMAX, [Deliberate(("b", "c*", "a"), "x")], partial=True).stale == ["a"]


def test_a_deliberate_entry_applies_only_to_its_failure_message():
    entries = [Deliberate(("b", "c*"), "internals", match="getitem")]
    result = compare(CONTROL, ZARRMAX, entries)
    assert list(result.undeclared) == ["b"]  # fails, but not for the declared reason
    assert set(result.deliberate) == {"c[1]", "c[2]"}


def test_a_test_missing_from_the_zarrmax_run_fails():
    zarrmax = {k: v for k, v in ZARRMAX.items() if k != "a"}
    result = compare(CONTROL, zarrmax, [Deliberate(("b", "c*"), "x")])
    assert not result.ok and result.missing == ["a"]


def test_a_pass_without_a_routed_read_fails():
    """The control read through engine="zarr"; the routed run passed reading nothing through zarrmax: the read
    escaped the routing, and the pass proves nothing."""
    zarrmax = {**ZARRMAX, "a": outcome("passed", reads=0)}
    result = compare(CONTROL, zarrmax, [Deliberate(("b", "c*"), "x")])
    assert not result.ok and result.escaped == ["a"]


def test_counts_and_report():
    result = compare(CONTROL, ZARRMAX, [Deliberate(("c*",), "internals")])
    assert counts(CONTROL) == {"passed": 4, "deliberate": 0, "failed": 2, "skipped": 1, "xfailed": 0, "xpassed": 0}
    assert counts(ZARRMAX, result.deliberate) == {"passed": 2, "deliberate": 2, "failed": 2, "skipped": 1,
                                                  "xfailed": 0, "xpassed": 0}
    lines = report({"tests": CONTROL}, {"tests": ZARRMAX}, result, {"zarr": 3.0, "zarrmax": 2.0})
    assert any(line.startswith("UNDECLARED: 1 tests") for line in lines)
    assert "  b: failed: AssertionError: not identical" in lines
    assert lines[-1].startswith("conformance FAILED: 1 undeclared differences")


def _fake_runs(monkeypatch: pytest.MonkeyPatch, tests: dict[str, dict]) -> list[str]:
    """`run.run_engines` replaced: each engine's report written from ``tests`` (no pytest); the engines run."""
    ran: list[str] = []

    def run_engines(engines, out, extra, jobs):
        for engine in engines:
            ran.append(engine)
            (out / f"{engine}.json").write_text(json.dumps({"tests": tests[engine], "collect_errors": []}))
            (out / f"{engine}.log").write_text("1 passed")
        return {engine: (0, 1.0) for engine in engines}

    monkeypatch.setattr(run, "run_engines", run_engines)
    return ran


def test_only_one_engine_runs_and_is_compared_with_the_others_report(tmp_path, monkeypatch, capsys):
    """``--only zarrmax`` reruns zarrmax alone against the control kept from an earlier run; without that
    report it fails saying so."""
    ran = _fake_runs(monkeypatch, {"zarr": CONTROL, "zarrmax": ZARRMAX})
    deliberate = tmp_path / "deliberate.toml"
    deliberate.write_text('[[deliberate]]\ntests = ["b", "c*"]\nreason = "x"\n')
    args = ["--out", str(tmp_path), "--deliberate", str(deliberate)]
    assert run.main([*args, "--only", "zarrmax"]) == 1
    assert ran == ["zarrmax"]
    assert f"conformance FAILED: no report {tmp_path / 'zarr.json'} (--only runs one engine" in capsys.readouterr().out
    assert run.main(args) == 0 and ran == ["zarrmax", "zarr", "zarrmax"]
    (tmp_path / "zarrmax.json").write_text("stale: --only rewrites it")
    assert run.main([*args, "--only", "zarrmax"]) == 0 and ran[-1] == "zarrmax" and len(ran) == 4
    assert capsys.readouterr().out.splitlines()[-1].startswith("conformance OK")


def test_the_deliberate_list_parses_and_gives_every_entry_a_reason():
    entries = load_deliberate(Path(routing.__file__).parent / "deliberate.toml")
    assert entries and all(e.reason and e.patterns for e in entries)


@pytest.mark.parametrize("text, error", [
    ('[[deliberate]]\ntests = ["a"]\n', "needs a `reason`"),
    ('[[deliberate]]\ntests = []\nreason = "r"\n', "non-empty list"),
    ('[[deliberate]]\ntests = ["a"]\nreason = "r"\nwhy = "x"\n', "unknown keys"),
])
def test_a_malformed_deliberate_list_is_refused(tmp_path, text, error):
    path = tmp_path / "deliberate.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=error):
        load_deliberate(path)


def test_routing_reads_through_zarrmax_and_writes_through_zarr(tmp_path):
    path = tmp_path / "r.zarr"
    expected = xr.Dataset({"v": ("x", np.arange(4.0))}, coords={"x": np.arange(4)})
    undo = routing.install()
    try:
        expected.to_zarr(path, zarr_format=3, consolidated=False)  # a write: engine="zarr"'s ZarrStore
        before = routing.reads
        with xr.open_dataset(path, engine="zarr") as ds:
            from xarray_zarrmax.backend import ZarrmaxArray

            assert routing.reads == before + 1
            xr.testing.assert_identical(ds.load(), expected)
        with xr.open_zarr(path) as ds:
            assert routing.reads == before + 2
            assert ds.v.encoding["preferred_chunks"] == {"x": 4}
        lazy = xr.open_dataset(path, engine="zarr", chunks=None).v.variable._data
        while hasattr(lazy, "array"):
            lazy = lazy.array
        assert isinstance(lazy, ZarrmaxArray)
        with pytest.raises(routing.NotRouted, match="mode='a'"):
            xr.open_dataset(path, engine="zarr", mode="a")
    finally:
        undo()
    lazy = xr.open_dataset(path, engine="zarr", chunks=None, consolidated=False).v.variable._data
    while hasattr(lazy, "array"):
        lazy = lazy.array
    assert not isinstance(lazy, ZarrmaxArray)  # undone: engine="zarr" is zarr-python again


def test_routing_reads_a_zarrstore_through_zarrmax():
    """``xr.decode_cf(store)`` on xarray's ZarrStore (how xarray's tests read what they wrote with it)."""
    from xarray.backends.zarr import ZarrStore

    target = zarr.storage.MemoryStore({}, read_only=False)
    store = ZarrStore.open_group(target, mode="w", zarr_format=3)
    expected = xr.Dataset({"v": ("x", np.arange(3))})
    expected.dump_to_store(store)
    undo = routing.install()
    try:
        before = routing.reads
        with xr.decode_cf(store) as actual:
            xr.testing.assert_identical(actual.load(), expected)
        assert routing.reads == before + 1
    finally:
        undo()
