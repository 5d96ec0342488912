"""Run xarray's Zarr backend tests twice, engine="zarr" (the control) and engine="zarrmax", and compare.

    python -m tests.conformance.run [--out DIR] [--deliberate FILE] [--jobs 1|2] [--only ENGINE] [PYTEST_ARG ...]

Exit status 0 only if every test that passes under the control passes under zarrmax, except those the
deliberate list names (tests/conformance/deliberate.toml), and every entry of that list still names such a
difference. Also fatal: a collection error, a pytest run that did not finish, a test whose control run read
through engine="zarr" but whose routed run passed without reading through zarrmax (a read the harness did not
route). Counts for both engines are printed either way; each run's log and JSON report stay in ``--out``.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TEST_FILES = ("test_backends.py", "test_backends_datatree.py")
ENGINES = ("zarr", "zarrmax")
PASSING = ("passed",)
FAILING = ("failed", "error")


@dataclass(frozen=True, slots=True)
class Deliberate:
    """A deliberate difference: node id patterns (fnmatch), why zarrmax differs there and, optionally, a regex
    zarrmax's failure message must match (so the test failing for another reason is still a failure)."""

    patterns: tuple[str, ...]
    reason: str
    match: str | None = None

    def declares(self, nodeid: str, message: str) -> str | None:
        """The pattern that declares this failure, if any."""
        if self.match is not None and not re.search(self.match, message):
            return None
        return next((p for p in self.patterns if fnmatch.fnmatchcase(nodeid, p)), None)


def load_deliberate(path: Path) -> list[Deliberate]:
    """The deliberate list; every entry needs ``tests`` (a non-empty list of patterns) and a ``reason``; ``match``
    is optional."""
    doc = tomllib.loads(path.read_text())
    entries = []
    for i, raw in enumerate(doc.get("deliberate", [])):
        tests, reason = raw.get("tests"), raw.get("reason")
        if not (isinstance(tests, list) and tests and all(isinstance(t, str) and t for t in tests)):
            raise ValueError(f"{path}: deliberate entry {i} needs `tests`, a non-empty list of node id patterns. "
                             f"Got {tests!r}.")
        if not (isinstance(reason, str) and reason.strip()):
            raise ValueError(f"{path}: deliberate entry {i} ({tests[0]!r}) needs a `reason`. Got {reason!r}.")
        match = raw.get("match")
        if match is not None:
            if not isinstance(match, str):
                raise ValueError(f"{path}: deliberate entry {i}: `match` must be a regex string. Got {match!r}.")
            re.compile(match)
        unknown = set(raw) - {"tests", "reason", "match"}
        if unknown:
            raise ValueError(f"{path}: deliberate entry {i} has unknown keys {sorted(unknown)}")
        entries.append(Deliberate(tuple(tests), reason.strip(), match))
    return entries


@dataclass
class Comparison:
    """Where zarrmax's outcomes differ from the control's."""

    deliberate: dict[str, Deliberate] = field(default_factory=dict)  # node id -> the entry that declares it
    undeclared: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id -> zarrmax's outcome
    stale: list[str] = field(default_factory=list)  # patterns that match no difference
    missing: list[str] = field(default_factory=list)  # run under the control, absent from zarrmax's run
    escaped: list[str] = field(default_factory=list)  # read through engine="zarr" but never through zarrmax
    better: list[str] = field(default_factory=list)  # pass under zarrmax only

    @property
    def ok(self) -> bool:
        return not (self.undeclared or self.stale or self.missing or self.escaped)


def compare(control: dict[str, dict[str, Any]], zarrmax: dict[str, dict[str, Any]],
            deliberate: list[Deliberate], *, partial: bool = False) -> Comparison:
    """Compare per-test outcomes (the plugin's reports' ``tests``) against the deliberate list.

    ``partial``: the runs were a selection (pytest arguments such as ``-k``), so a deliberate pattern naming no
    test that ran is not stale; in a full run it is (a typo, or a test xarray removed)."""
    result = Comparison()
    used: set[str] = set()
    for nodeid, ours in sorted(control.items()):
        theirs = zarrmax.get(nodeid)
        if theirs is None:
            result.missing.append(nodeid)
            continue
        if ours["outcome"] not in PASSING:
            if theirs["outcome"] in PASSING:
                result.better.append(nodeid)
            continue
        if theirs["outcome"] in PASSING:
            if ours.get("reads", 0) > 0 and theirs.get("reads", 0) == 0:
                result.escaped.append(nodeid)
            continue
        entry, pattern = _match(nodeid, theirs.get("message", ""), deliberate)
        if entry is None:
            result.undeclared[nodeid] = theirs
        else:
            result.deliberate[nodeid] = entry
            used.add(pattern)
    result.stale = [p for entry in deliberate for p in entry.patterns if p not in used
                    and not (partial and not any(fnmatch.fnmatchcase(nodeid, p) for nodeid in control))]
    return result


def _match(nodeid: str, message: str, deliberate: list[Deliberate]) -> tuple[Deliberate | None, str]:
    for entry in deliberate:
        pattern = entry.declares(nodeid, message)
        if pattern is not None:
            return entry, pattern
    return None, ""


def counts(tests: dict[str, dict[str, Any]], deliberate: Collection[str] = ()) -> dict[str, int]:
    """passed / deliberate / failed (failures and errors not declared) / skipped / xfailed / xpassed."""
    outcomes = Counter("deliberate" if nodeid in deliberate else t["outcome"] for nodeid, t in tests.items())
    return {
        "passed": outcomes["passed"],
        "deliberate": outcomes["deliberate"],
        "failed": outcomes["failed"] + outcomes["error"],
        "skipped": outcomes["skipped"],
        "xfailed": outcomes["xfailed"],
        "xpassed": outcomes["xpassed"],
    }


def xarray_tests_dir() -> Path:
    spec = importlib.util.find_spec("xarray")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("conformance: xarray is not installed")
    tests = Path(next(iter(spec.submodule_search_locations))) / "tests"
    for name in TEST_FILES:
        if not (tests / name).is_file():
            raise SystemExit(f"conformance: expected xarray's test file {tests / name}; this xarray ships without it")
    return tests


def pytest_command(engine: str, out: Path, extra: list[str]) -> list[str]:
    tests = xarray_tests_dir()
    return [
        sys.executable, "-m", "pytest", "-c", str(HERE / "pytest.ini"), f"--rootdir={tests}",
        "-p", "tests.conformance.plugin", f"--conformance-engine={engine}",
        f"--conformance-report={out / f'{engine}.json'}", "-q", "-p", "no:cacheprovider",
        *(str(tests / name) for name in TEST_FILES), *extra,
    ]


def run_engines(engines: list[str], out: Path, extra: list[str], jobs: int) -> dict[str, tuple[int, float]]:
    """Each engine's pytest run (``jobs`` at once), output to ``out/ENGINE.log``: {engine: (exit code, seconds)}."""
    pending = list(engines)
    running: dict[str, tuple[subprocess.Popen[bytes], float, Any]] = {}
    done: dict[str, tuple[int, float]] = {}
    while pending or running:
        while pending and len(running) < jobs:
            engine = pending.pop(0)
            log = (out / f"{engine}.log").open("wb")
            print(f"conformance: running xarray's Zarr tests with engine={engine!r} (log: {out / f'{engine}.log'})",
                  flush=True)
            proc = subprocess.Popen(pytest_command(engine, out, extra), cwd=REPO, stdout=log,
                                    stderr=subprocess.STDOUT)
            running[engine] = (proc, time.monotonic(), log)
        for engine, (proc, start, log) in list(running.items()):
            if proc.poll() is not None:
                log.close()
                done[engine] = (proc.returncode, time.monotonic() - start)
                del running[engine]
        time.sleep(0.2)
    return done


def report(control: dict[str, Any], zarrmax: dict[str, Any], comparison: Comparison,
           durations: dict[str, float]) -> list[str]:
    """The lines printed at the end: differences first, the counts table last."""
    lines: list[str] = []
    if comparison.undeclared:
        lines.append(f"UNDECLARED: {len(comparison.undeclared)} tests pass with engine='zarr' and not with "
                     "engine='zarrmax' (fix zarrmax, or add a deliberate entry with its reason):")
        lines += [f"  {nodeid}: {t['outcome']}: {t['message']}" for nodeid, t in comparison.undeclared.items()]
    if comparison.stale:
        lines.append(f"STALE: {len(comparison.stale)} deliberate patterns match no difference (remove them):")
        lines += [f"  {p}" for p in comparison.stale]
    if comparison.missing:
        lines.append(f"MISSING: {len(comparison.missing)} tests ran under engine='zarr' but not under zarrmax:")
        lines += [f"  {nodeid}" for nodeid in comparison.missing]
    if comparison.escaped:
        lines.append(f"NOT ROUTED: {len(comparison.escaped)} tests read through engine='zarr' in the control but "
                     "passed without a single read through zarrmax:")
        lines += [f"  {nodeid}" for nodeid in comparison.escaped]
    if comparison.better:
        lines.append(f"note: {len(comparison.better)} tests pass with zarrmax and not with the control: "
                     + ", ".join(comparison.better))
    reasons = Counter(entry.reason for entry in comparison.deliberate.values())
    if reasons:
        lines.append(f"deliberate differences ({len(comparison.deliberate)} tests):")
        lines += [f"  {n:4d}  {reason}" for reason, n in reasons.most_common()]
    read = sum(1 for t in zarrmax["tests"].values() if t.get("reads", 0) > 0)
    lines.append(f"conformance: {len(control['tests'])} tests of xarray {_version('xarray')} (zarr {_version('zarr')}) "
                 f"selected; {read} of them read through zarrmax")
    lines.append(f"{'engine':8} {'passed':>7} {'deliberate':>10} {'failed':>7} {'skipped':>8} {'xfailed':>8} "
                 f"{'time':>7}")
    for engine, data, declared in (("zarr", control, set()), ("zarrmax", zarrmax, set(comparison.deliberate))):
        c = counts(data["tests"], declared)
        lines.append(f"{engine:8} {c['passed']:7d} {c['deliberate']:10d} {c['failed']:7d} {c['skipped']:8d} "
                     f"{c['xfailed']:8d} {_seconds(durations.get(engine)):>7}")
    verdict = "OK" if comparison.ok else "FAILED"
    lines.append(f"conformance {verdict}: {len(comparison.undeclared)} undeclared differences, "
                 f"{len(comparison.stale)} stale deliberate patterns, {len(comparison.escaped)} unrouted reads, "
                 f"{len(comparison.missing)} missing tests")
    return lines


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "build" / "conformance",
                        help="where the logs and JSON reports go (default: build/conformance)")
    parser.add_argument("--deliberate", type=Path, default=HERE / "deliberate.toml")
    parser.add_argument("--jobs", type=int, choices=(1, 2), default=2 if (os.cpu_count() or 1) > 1 else 1,
                        help="run the two engines one after the other (1) or at once (2, the default with 2 cores "
                        "or more: each run is mostly one busy thread)")
    parser.add_argument("--only", choices=ENGINES,
                        help="run this engine's tests alone and compare with the other's report already in --out "
                        "(after a fix, rerun zarrmax against the control of an earlier run)")
    parser.add_argument("--compare-only", action="store_true",
                        help="compare the reports already in --out without running pytest")
    args, extra = parser.parse_known_args(argv)
    deliberate = load_deliberate(args.deliberate)  # a malformed list fails before minutes of tests
    args.out.mkdir(parents=True, exist_ok=True)
    durations: dict[str, float] = {}
    if not args.compare_only:
        engines = [args.only] if args.only else list(ENGINES)
        for engine in engines:
            (args.out / f"{engine}.json").unlink(missing_ok=True)
        finished = run_engines(engines, args.out, extra, args.jobs)
        for engine in engines:
            code, seconds = finished[engine]
            durations[engine] = seconds
            tail = (args.out / f"{engine}.log").read_text(errors="replace").strip().splitlines()[-1:]
            print(f"conformance: engine={engine!r}: pytest exit {code} after {seconds:.0f} s: {' '.join(tail)}")
            if code not in (0, 1):  # 1: some tests failed; anything else: the run itself did not complete
                print(f"conformance FAILED: pytest with engine={engine!r} exited {code}; see {args.out}/{engine}.log")
                return 1
    reports = {}
    for engine in ENGINES:
        path = args.out / f"{engine}.json"
        if not path.is_file():
            why = " (--only runs one engine: the other's report must be there from an earlier run)" if args.only else ""
            print(f"conformance FAILED: no report {path}{why}")
            return 1
        reports[engine] = json.loads(path.read_text())
        if reports[engine]["collect_errors"]:
            print(f"conformance FAILED: collection errors with engine={engine!r}:")
            print("\n".join(f"  {e}" for e in reports[engine]["collect_errors"]))
            return 1
    comparison = compare(reports["zarr"]["tests"], reports["zarrmax"]["tests"], deliberate,
                         partial=reports["zarr"].get("partial", False))
    print("\n".join(report(reports["zarr"], reports["zarrmax"], comparison, durations)))
    return 0 if comparison.ok else 1


if __name__ == "__main__":
    sys.exit(main())
