"""The asv results of a history over releases (`asv_bench.shared.release_runs`), as perf_report's history page
reads them: one result per release, why a benchmark could not run at a release, run-to-run noise from the
reruns of the newest release, and the regressions beyond that noise.

Values are kept per *series*: one benchmark (``module.Class.method``), one combination of its other parameters
and one engine (``engine``, or a write benchmark's ``stack``; benchmarks with neither are engine="zarrmax"'s).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asv_bench.shared.process import ROOT

ENGINE_PARAMS = ("engine", "stack")
HIGHER_IS_BETTER_UNITS = {"GB/s", "ratio"}
IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError", "AttributeError")


@dataclass(frozen=True)
class Release:
    commit: str
    name: str  # the tag, or the abbreviated hash


@dataclass
class Point:
    """One series' measurement at one release: value None when it failed (``reason`` says why), NaN skipped."""

    value: float | None
    q25: float | None = None
    q75: float | None = None
    reason: str = ""


@dataclass
class Method:
    name: str
    kind: str  # asv's type: time, track, peakmemory, memory
    unit: str
    param_names: list[str]
    # (other parameters as "name=value" pairs, engine) -> release commit -> point
    series: dict[tuple[tuple[tuple[str, str], ...], str], dict[str, Point]] = field(default_factory=dict)

    @property
    def higher_is_better(self) -> bool:
        return self.unit in HIGHER_IS_BETTER_UNITS

    @property
    def engine_param(self) -> str | None:
        return next((p for p in ENGINE_PARAMS if p in self.param_names), None)

    def engines(self) -> list[str]:
        return sorted({engine for _, engine in self.series}, key=lambda e: (e != "zarr", e != "to_zarr", e))

    def groups(self) -> list[tuple[tuple[str, str], ...]]:
        seen: dict[tuple[tuple[str, str], ...], None] = {}
        for others, _ in self.series:
            seen.setdefault(others, None)
        return list(seen)


def unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" else s


def releases(path: Path) -> list[Release]:
    """The commits of ``path`` (asv's HASHFILE format), each named by its tag (`git describe --tags
    --exact-match`), or its abbreviated hash where no tag points at it."""
    out = []
    for line in path.read_text().splitlines():
        commit = line.strip()
        if not commit:
            continue
        tag = subprocess.run(["git", "describe", "--tags", "--exact-match", commit], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip()
        out.append(Release(commit, tag or commit[:8]))
    return out


def _load(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def result_file(directory: Path, commit: str) -> dict[str, Any] | None:
    """The newest asv result file of ``commit`` in a machine's directory (None: the release was not run)."""
    files = sorted(directory.glob(f"{commit[:8]}-*.json"), key=lambda p: p.stat().st_mtime)
    return _load(files[-1]) if files else None


def _float(x: Any) -> float | None:
    try:
        return None if x is None else float(x)
    except (TypeError, ValueError):
        return None


def points(data: dict[str, Any], meta: dict[str, Any]) -> dict[str, dict[tuple[str, ...], Point]]:
    """Every benchmark of one result file: parameter combination (asv's repr strings) -> point."""
    out: dict[str, dict[tuple[str, ...], Point]] = {}
    columns = data.get("result_columns", ["result", "params"])
    for name, entry in data["results"].items():
        row = dict(zip(columns, entry, strict=False))
        params = row.get("params") or meta.get(name, {}).get("params") or []
        combos = list(itertools.product(*params)) if params else [()]

        def column(key: str, n: int = len(combos)) -> list[Any]:
            value = row.get(key)
            return value if isinstance(value, list) else [value] * n

        out[name] = {combo: Point(_float(v), _float(a), _float(b)) for combo, v, a, b in
                     zip(combos, column("result"), column("stats_q_25"), column("stats_q_75"), strict=False)}
    return out


# -- why a benchmark failed: asv keeps no error text in its result files, so it is read from the run's log -----

_HEADER = re.compile(r"^\[\s*[\d.]+%\] ·{2,4} (?P<name>\S.*?)\s{2,}(?P<status>ok|failed|\d+/\d+ failed)\s*$")
_SETUP = re.compile(r"^\[\s*[\d.]+%\] ·{2,4} Setting up (?P<key>\S+)\s+(?P<status>ok|failed)\s*$")
_PATH = re.compile(r" \(/[^)]*\)$")  # ImportError's "(/path/to/module.py)"
_OTHER = re.compile(r"^\[\s*[\d.]+%\] (?P<dots>·+) (?P<rest>.*)$")
_COMMIT = re.compile(r"For \S+ commit (?P<hash>[0-9a-f]{8})")
_PARAMS = re.compile(r"^(?:\[\s*[\d.]+%\] ·+ )?\s*For parameters: (?P<params>.*)$")
_ERROR = re.compile(r"^\s*(?P<line>(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|AssertionError)"
                    r"(?::.*)?|asv: .*(?:timed out|failed).*)$")


@dataclass
class Failures:
    """Failure reasons read from one asv log: (commit8, benchmark, params string) -> reason, setup_cache
    (commit8, key) -> reason."""

    benchmarks: dict[tuple[str, str, str], str] = field(default_factory=dict)
    setup_caches: dict[tuple[str, str], str] = field(default_factory=dict)


def read_failures(logs: list[Path], names: list[str]) -> Failures:
    """The first exception line of each failed benchmark (per parameter combination) and setup_cache in the
    ``--show-stderr`` output of asv runs; ``names``: every benchmark name (asv shortens long ones to ...tail)."""
    out = Failures()

    def full(name: str) -> str:
        if name.startswith("..."):
            return next((n for n in names if n.endswith(name[3:])), name)
        return name

    for log in logs:
        if not log.exists():
            continue
        commit, bench, setup, params = "", "", "", ""
        for line in log.read_text(errors="replace").splitlines():
            if m := _COMMIT.search(line):
                commit, bench, setup, params = m["hash"], "", "", ""
                continue
            if m := _SETUP.match(line):
                bench, params = "", ""
                setup = m["key"] if m["status"] == "failed" else ""
                continue
            if m := _HEADER.match(line):
                bench, setup, params = full(m["name"]), "", ""
                continue
            if m := _PARAMS.match(line):
                params = m["params"].strip()
                continue
            if m := _OTHER.match(line):
                # a new item, not the first line of a result table nor the error output (deeper) of this one
                if len(m["dots"]) <= 3 and not m["rest"].startswith(("=", "-")):
                    bench, setup, params = "", "", ""
                continue
            if (m := _ERROR.match(line)) and commit and (setup or bench):
                where: dict[Any, str] = out.setup_caches if setup else out.benchmarks  # type: ignore[assignment]
                key = (commit, setup) if setup else (commit, bench, params)
                # the first exception (the cause: a teardown's error after it is a consequence) wins, and any
                # exception wins over asv's own "benchmark failed (exit status 1)"
                if key not in where or (where[key].startswith("asv: ") and not m["line"].startswith("asv: ")):
                    where[key] = _PATH.sub("", m["line"].strip())
    return out


def reason(failures: Failures, commit: str, name: str, combo: tuple[str, ...], meta: dict[str, Any]) -> str:
    key = meta.get(name, {}).get("setup_cache_key")
    why = failures.benchmarks.get((commit[:8], name, ", ".join(combo))) or failures.benchmarks.get(
        (commit[:8], name, ""))
    if why is None and key is not None and (commit[:8], key) in failures.setup_caches:
        why = f"setup_cache: {failures.setup_caches[(commit[:8], key)]}"
    return why or "the log names no exception"


def not_runnable(reason_text: str) -> bool:
    """A failure from the release lacking what the benchmark or its harness imports or calls."""
    text = reason_text.removeprefix("setup_cache: ")
    return text.startswith(IMPORT_ERRORS) or "unexpected keyword argument" in text


# -- the history -------------------------------------------------------------------------------------------------


def bench_regexes(argv: list[str]) -> list[str]:
    """The ``--bench`` regexes of an asv command line."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in ("--bench", "-b")]


def selected(name: str, combo: tuple[str, ...], regexes: list[str]) -> bool:
    """Whether asv's ``--bench`` ``regexes`` select this combination (asv matches ``name(param, ...)``)."""
    spelled = f"{name}({', '.join(combo)})" if combo else name
    return not regexes or any(re.search(r, spelled) for r in regexes)


def collect(releases_: list[Release], results: dict[str, dict[str, Any]], meta: dict[str, Any],
            failures: Failures, regexes: list[str]) -> dict[str, Method]:
    """Every series the run's ``--bench`` ``regexes`` selected (every one, without them) that any release did
    not skip; ``results``: commit -> its result file."""
    methods: dict[str, Method] = {}
    for release in releases_:
        data = results.get(release.commit)
        if data is None:
            continue
        for name, per_combo in points(data, meta).items():
            info = meta.get(name, {})
            param_names = list(info.get("param_names") or [])
            prefix = name.rsplit(".", 1)[-1].split("_", 1)[0]
            kind = info.get("type") or {"peakmem": "peakmemory", "mem": "memory"}.get(prefix, prefix)
            method = methods.setdefault(name, Method(name, kind, str(info.get("unit") or ""), param_names))
            engine_param = method.engine_param
            for combo, point in per_combo.items():
                if not selected(name, combo, regexes):
                    continue  # asv marks every combination failed when a setup_cache fails
                named = dict(zip(param_names, combo, strict=False))
                engine = unquote(named.pop(engine_param, "'zarrmax'")) if engine_param else "zarrmax"
                if point.value is None:
                    point.reason = reason(failures, release.commit, name, combo, meta)
                key = (tuple((k, unquote(v)) for k, v in named.items()), engine)
                if not regexes and point.value is not None and math.isnan(point.value) and key not in method.series:
                    continue  # skipped or not selected (asv writes NaN for both), and nothing measured before
                method.series.setdefault(key, {})[release.commit] = point
    for method in methods.values():  # drop series that only ever skipped
        method.series = {k: v for k, v in method.series.items()
                         if any(p.value is None or not math.isnan(p.value) for p in v.values())}
    return {n: m for n, m in sorted(methods.items()) if m.series}


def measured(point: Point | None) -> bool:
    return point is not None and point.value is not None and not math.isnan(point.value)


@dataclass
class Noise:
    """How far a benchmark's measurements move where no code of the package changed: the largest ratio (larger /
    smaller) between two runs of the newest release, and, for time benchmarks, between consecutive releases
    of a baseline engine (zarr-python's code, the same at every release in the one environment), each over
    every parameter combination (and engine) measured twice; ``*_n``: how many combinations."""

    reruns: float = 1.0
    reruns_n: int = 0
    baseline: float = 1.0
    baseline_n: int = 0

    @property
    def threshold(self) -> float:
        return max(self.reruns, self.baseline)


BASELINES = ("zarr", "to_zarr")


def _ratio(values: list[float | None]) -> float | None:
    good = [v for v in values if v is not None and not math.isnan(v) and v > 0]
    return max(good) / min(good) if len(good) >= 2 else None


def noise(newest: str, official: dict[str, Any] | None, reruns: list[dict[str, Any]], meta: dict[str, Any],
          methods: dict[str, Method], releases_: list[Release]) -> dict[str, Noise]:
    """`Noise` per benchmark, from the runs of the newest release (``official``: the history's; ``reruns``) and
    the baseline engines' series in ``methods``; a benchmark with neither is absent."""
    out: dict[str, Noise] = {}
    runs = [points(d, meta) for d in ([official] if official else []) + reruns if d.get("commit_hash") == newest]
    if len(runs) >= 2:
        for name in set().union(*runs):
            for combo in set().union(*(r.get(name, {}) for r in runs)):
                ratio = _ratio([r[name][combo].value for r in runs if name in r and combo in r[name]])
                if ratio is not None:
                    n = out.setdefault(name, Noise())
                    n.reruns, n.reruns_n = max(n.reruns, ratio), n.reruns_n + 1
    for method in methods.values():
        if method.kind != "time":  # counts are exact: a baseline's count changing is the harness, not noise
            continue
        for (_, engine), series in method.series.items():
            if engine not in BASELINES:
                continue
            got = [series[r.commit].value for r in releases_ if measured(series.get(r.commit))]
            pairs = [ratio for a, b in zip(got, got[1:], strict=False) if (ratio := _ratio([a, b])) is not None]
            if pairs:
                n = out.setdefault(method.name, Noise())
                n.baseline, n.baseline_n = max(n.baseline, *pairs), n.baseline_n + 1
    return out


@dataclass
class Regression:
    method: str
    others: tuple[tuple[str, str], ...]
    engine: str
    before: Release
    after: Release
    old: Point
    new: Point
    factor: float  # how many times worse
    threshold: float


def regressions(methods: dict[str, Method], releases_: list[Release],
                thresholds: dict[str, Noise]) -> list[Regression]:
    """Every series where a release does worse than the nearest earlier release that measured it, by more than
    its benchmark's noise threshold and, where asv recorded quartiles, with the two interquartile ranges apart."""
    out = []
    for method in methods.values():
        if method.name not in thresholds:
            continue
        threshold = thresholds[method.name].threshold
        for (others, engine), per_release in method.series.items():
            previous: tuple[Release, Point] | None = None
            for release in releases_:
                point = per_release.get(release.commit)
                if not measured(point):
                    continue
                assert point is not None and point.value is not None
                if previous is not None:
                    before, old = previous
                    assert old.value is not None
                    worse = old.value / point.value if method.higher_is_better else point.value / old.value
                    apart = True
                    if None not in (old.q25, old.q75, point.q25, point.q75):
                        apart = (point.q75 < old.q25) if method.higher_is_better else (point.q25 > old.q75)  # type: ignore[operator]
                    if old.value > 0 and point.value > 0 and worse > threshold and apart:
                        out.append(Regression(method.name, others, engine, before, release, old, point, worse,
                                              threshold))
                previous = (release, point)
    return out


def env_versions(env_root: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """The versions of ``packages`` installed in asv's environments (the newest environment that has each)."""
    found: dict[str, str] = {}
    for dist in sorted(env_root.glob("*/lib/python*/site-packages/*.dist-info"), key=lambda p: p.stat().st_mtime):
        name, _, version = dist.name.removesuffix(".dist-info").partition("-")
        if name.lower().replace("_", "-") in packages:
            found[name.lower().replace("_", "-")] = version
    return {p: found[p] for p in packages if p in found}
