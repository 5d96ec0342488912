"""pytest plugin for the conformance run: ``-p tests.conformance.plugin --conformance-engine=zarr|zarrmax``.

- ``--conformance-engine=zarrmax`` routes every read xarray's tests make with engine="zarr" to engine="zarrmax"
  (see `tests.conformance.routing`); ``zarr`` routes nothing: the control, under the same harness, its
  engine="zarr" reads only counted (so the runner can tell a read that escaped the routing).
- ``--conformance-report=PATH`` writes each test's outcome as JSON for `tests.conformance.run` to compare.
- What xarray's own repository configuration gives its tests and an installed xarray lacks: the
  ``skip_if_param`` mark, ``@pytest.mark.asyncio`` tests (run on a fresh event loop, as pytest-asyncio's
  default function scope does), skipping ``flaky`` and ``network`` tests, and each test run from its own
  temporary directory.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENGINES = ("zarr", "zarrmax")
_results: dict[str, dict[str, Any]] = {}
_collect_errors: list[str] = []
_undo: list[Any] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption("--conformance-engine", choices=ENGINES, default="zarr",
                    help="engine that reads: zarr (the control) or zarrmax (engine='zarr' reads routed to zarrmax)")
    group.addoption("--conformance-report", default=None, help="write each test's outcome to this JSON file")


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "skip_if_param(reason, condition=True, **params): skip the test where its parameters have these values",
        "asyncio: a coroutine test, run on a fresh event loop",
        "flaky: flaky tests (skipped, as in xarray's own runs without --run-flaky)",
        "network: tests needing the internet (skipped)",
        "mypy: type annotation tests (skipped)",
        "slow: slow tests",
        "slow_hypothesis: slow hypothesis tests",
        "skip_with_dask_array: skipped under the dask-array chunk manager (not used here)",
        "xfail_with_dask_array: xfails under the dask-array chunk manager (not used here)",
    ):
        config.addinivalue_line("markers", line)
    from tests.conformance import routing

    zarrmax = config.getoption("--conformance-engine") == "zarrmax"
    _undo.append(routing.install() if zarrmax else routing.install_counters())


def pytest_unconfigure(config: pytest.Config) -> None:
    while _undo:
        _undo.pop()()


def pytest_report_header(config: pytest.Config) -> str:
    engine = config.getoption("--conformance-engine")
    what = "engine='zarr' reads routed to engine='zarrmax'" if engine == "zarrmax" else "control, nothing routed"
    return f"conformance engine: {engine} ({what})"


def is_zarr_test(item: pytest.Item) -> bool:
    """The run's selection: every test xarray marks as needing zarr (``requires_zarr`` and its variants, a skipif
    whose reason starts "requires zarr"), or whose id names zarr (a class, a function, an engine parameter)."""
    if "zarr" in item.nodeid.lower():
        return True
    return any(str(mark.kwargs.get("reason", "")).startswith("requires zarr") for mark in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept = [item for item in items if is_zarr_test(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not is_zarr_test(item)])
        items[:] = kept
    for item in items:
        params = item.callspec.params if isinstance(item, pytest.Function) and hasattr(item, "callspec") else {}
        for mark in item.iter_markers("skip_if_param"):
            wanted = dict(mark.kwargs)
            reason = wanted.pop("reason", "skip_if_param")
            condition = wanted.pop("condition", True)
            if condition and all(name in params and params[name] == value for name, value in wanted.items()):
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_runtest_setup(item: pytest.Item) -> None:
    for name in ("flaky", "network", "mypy"):
        if name in item.keywords:
            pytest.skip(f"{name} tests are not part of the conformance run")


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path: Path) -> Iterator[None]:
    """As xarray's conftest: each test runs in its own temporary directory, so relative paths land there."""
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield
    finally:
        os.chdir(before)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[Any]:
    """Each test's count of reads through the engine under test (see `routing.reads`)."""
    from tests.conformance import routing

    before = routing.reads
    try:
        return (yield)
    finally:
        _results.setdefault(item.nodeid, {"outcome": "passed", "message": ""})["reads"] = routing.reads - before


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _collect_errors.append(f"{report.nodeid}: {_message(report)}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """One outcome per test: passed, failed, error (setup or teardown), skipped, xfailed or xpassed."""
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.when == "setup":  # a fresh entry per run of the test: outcome from this run only
        entry.update(outcome="passed", message="")
    if report.when == "setup":
        if report.skipped:
            entry.update(outcome="xfailed" if hasattr(report, "wasxfail") else "skipped", message=_message(report))
        elif report.failed:
            entry.update(outcome="error", message=_message(report))
    elif report.when == "call":
        if hasattr(report, "wasxfail"):
            entry.update(outcome="xfailed" if report.skipped else "xpassed", message=str(report.wasxfail))
        elif report.failed:
            entry.update(outcome="failed", message=_message(report))
        elif report.skipped:
            entry.update(outcome="skipped", message=_message(report))
    elif report.failed and entry["outcome"] in ("passed", "xpassed"):
        entry.update(outcome="error", message=_message(report))


def _message(report: Any) -> str:
    """The failure's one line (exception type and message), or a skip's reason."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    text = crash if crash is not None else str(longrepr)
    return text.strip().splitlines()[0][:500] if text.strip() else ""


def _partial(config: pytest.Config) -> bool:
    """Whether the run was narrowed (``-k``, ``-m``, ``--deselect``, a node id instead of a file)."""
    narrowed = config.getoption("keyword") or config.getoption("markexpr") or config.getoption("deselect")
    return bool(narrowed) or any("::" in str(arg) for arg in config.args)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--conformance-report")
    if path:
        Path(path).write_text(json.dumps({
            "engine": session.config.getoption("--conformance-engine"),
            "partial": _partial(session.config),
            "collect_errors": _collect_errors,
            "tests": _results,
        }, indent=0, sort_keys=True))
