"""Regenerate docs/dev/performance-asv.md (markdown tables) and docs/dev/performance-asv.png from asv's results.

    .venv/bin/python -m asv_bench.tables.perf_report [--results .asv/results] [--machine NAME]
                                                     [--releases asv_bench/releases.txt] [--commit HASH]
                                                     [--out docs/dev/performance-asv.md]
                                                     [--plot docs/dev/performance-asv.png]

By default, the history over releases (issue #44; the runs: `asv_bench.shared.release_runs`): for every
benchmark, one line per release of ``--releases`` (named by its tag) with engine="zarr" and engine="zarrmax"
side by side, "not runnable at this release (why)" where the release lacks what the benchmark needs (the
reason is read from the runs' logs in ``--logs``: asv's result files keep no error text), a plot of the
history, and at the top every regression between two releases beyond the run-to-run noise that the reruns of
the newest release (``--reruns``) show. The page states the rule, the command, the machine, its load average
and ``ZARRMAX_ASV_MIB`` (from the runs' records in ``--logs``).

``--commit HASH`` (or no results for any release) gives the older one-commit page instead: the results of that
commit (by default the machine's newest), every environment's file for it merged, the newest file winning.

Both read the JSON result files asv writes (``asv run``, or ``asv run --python=same --set-commit-hash HASH``:
a ``--python=same`` run without it is not saved), by default for the machine with the newest results, and the
benchmark metadata (parameter names, units) from ``benchmarks.json`` beside them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asv_bench.shared import release_history as rh
from asv_bench.shared import release_plot
from asv_bench.shared.process import ROOT
from asv_bench.shared.runner import Session, Table, execute

ENGINES = ("zarr", "zarrmax")
# One line on what each benchmark measures (the suite's docstrings in asv_bench/benchmarks/ say more).
NOTES = {
    "time_open_dataset": "`xr.open_dataset(..., chunks={})` of a 277-array group (273 variables + 4 coordinates) "
                         "on MinIO; latency 20 ms puts toxiproxy in front of it.",
    "track_open_requests": "GET + LIST + HEAD requests sent by one open of the same group.",
    "time_read": "open plus full read (`.values`, dask threaded scheduler, 16 threads) of one array per layout.",
    "peakmem_read": "the same read; peak RSS of the whole benchmark process (interpreter and imports included).",
    "track_read_throughput": "GB/s of decoded output, median of 3 full reads after a warm-up.",
    "track_ratio_to_ceiling": "raw-ceiling time / engine time for the same stored objects (1.0: as fast as "
                              "reading the stored bytes with no decode).",
    "track_read_peak_memory": "peak RSS of a fresh process reading the array once, minus its RSS before the "
                              "read: what the read itself costs.",
    "time_read_distributed": "full read on a distributed LocalCluster (2 worker processes, 2 threads each).",
    "time_read_to_device": "full read into GPU memory (CuPy array).",
    "track_read_throughput_to_device": "GB/s into GPU memory, median of 3 reads after a warm-up.",
    "time_open_datatree": "`xr.open_datatree(..., chunks={})` of a 10-group, 100-array tree on MinIO; latency 20 ms "
                          "puts toxiproxy in front of it.",
    "track_open_tree_requests": "GET + LIST + HEAD requests sent by one open of the same tree.",
    "time_write": "one whole-array write (`stack`: `to_zarr` is xarray's `Dataset.to_zarr` with engine zarr, "
                  "`zarrmax` is `xarray_zarrmax.to_zarr`; `put` and `encode` the raw PUT and encode ceilings).",
    "track_write_requests": "GETs and PUTs of stored objects sent by one `xarray_zarrmax.to_zarr` write or append "
                            "on MinIO (zarrmax only).",
    "time_operation": "one access-pattern operation on a 96 x 73 x 144 float32 field after a fresh open "
                      "(`chunks=None`); MinIO through toxiproxy adding 20 ms.",
    "track_requests": "GET requests one access-pattern operation sends after a fresh open (MinIO).",
}
# asv reads every number as lower-is-better; these are the other way round.
HIGHER_IS_BETTER_UNITS = {"GB/s", "ratio"}


@dataclass
class Benchmark:
    name: str
    kind: str  # asv's type: time, track, peakmemory, memory
    unit: str
    param_names: list[str]
    rows: list[tuple[dict[str, str], float | None]]  # (parameters, value); None failed, NaN skipped

    @property
    def higher_is_better(self) -> bool:
        return self.unit in HIGHER_IS_BETTER_UNITS


def _load(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def result_files(results: Path, machine: str | None) -> tuple[str, list[tuple[Path, dict[str, Any]]]]:
    """The chosen machine and its result files (parsed), newest commit first."""
    machines = sorted(p for p in results.iterdir() if p.is_dir() and (p / "machine.json").exists())
    if machine is not None:
        machines = [p for p in machines if p.name == machine]
        if not machines:
            raise SystemExit(f"no results for machine {machine!r} under {results}")
    found: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for mdir in machines:
        for path in mdir.glob("*.json"):
            if path.name == "machine.json":
                continue
            data = _load(path)
            if "results" in data and "commit_hash" in data:
                found.setdefault(mdir.name, []).append((path, data))
    if not found:
        raise SystemExit(f"no asv result files under {results}: run `cd asv_bench && asv run` first "
                         "(--python=same runs are saved only with --set-commit-hash)")
    chosen = max(found, key=lambda m: max(d.get("date") or 0 for _, d in found[m]))
    files = sorted(found[chosen], key=lambda pd: (pd[1].get("date") or 0, pd[0].stat().st_mtime), reverse=True)
    return chosen, files


def _value(raw: Any) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None


def collect(files: list[tuple[Path, dict[str, Any]]], meta: dict[str, Any],
            commit: str | None) -> tuple[dict[str, Any], dict[str, Benchmark]]:
    """Merge the result files of one commit (``commit`` prefix, or the newest) into benchmarks."""
    if commit is not None:
        files = [pd for pd in files if pd[1]["commit_hash"].startswith(commit)]
        if not files:
            raise SystemExit(f"no results for commit {commit!r}")
    head = files[0][1]
    same = sorted((pd for pd in files if pd[1]["commit_hash"] == head["commit_hash"]),
                  key=lambda pd: pd[0].stat().st_mtime)  # oldest first: newer files overwrite
    benches: dict[str, Benchmark] = {}
    envs = []
    for _, data in same:
        envs.append(data.get("env_name", "?"))
        columns = data.get("result_columns", ["result", "params"])
        for name, entry in data["results"].items():
            row = dict(zip(columns, entry, strict=False))
            values = row.get("result")
            params = row.get("params") or []
            info = meta.get(name, {})
            param_names = list(info.get("param_names") or [f"p{i}" for i in range(len(params))])
            combos = list(itertools.product(*params)) if params else [()]
            if not isinstance(values, list):
                values = [values] * len(combos)
            rows = [({n: str(v) for n, v in zip(param_names, combo, strict=False)}, _value(x))
                    for combo, x in zip(combos, values, strict=False)]
            prefix = name.rsplit(".", 1)[-1].split("_", 1)[0]
            kind = info.get("type") or {"peakmem": "peakmemory", "mem": "memory"}.get(prefix, prefix)
            benches[name] = Benchmark(name, kind, str(info.get("unit") or ""), param_names, rows)
    return {**head, "envs": envs}, benches


def _unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" else s


def fmt(value: float | None, bench: Benchmark | rh.Method) -> str:
    if value is None:
        return "failed"
    if math.isnan(value):
        return "n/a"
    if bench.kind == "time":
        return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"
    if bench.kind in ("peakmemory", "memory") or bench.unit == "bytes":
        return f"{value / 2**20:.0f} MiB"
    if bench.unit == "requests":
        return f"{value:.0f}"
    if bench.unit == "GB/s":
        return f"{value:.2f} GB/s"
    return f"{value:.3g}"


def advantage(zarr: float | None, zarrmax: float | None, bench: Benchmark | rh.Method) -> float | None:
    """How many times better zarrmax does than zarr (> 1: better), whichever way the unit points."""
    if zarr is None or zarrmax is None or math.isnan(zarr) or math.isnan(zarrmax) or zarr <= 0 or zarrmax <= 0:
        return None
    return zarrmax / zarr if bench.higher_is_better else zarr / zarrmax


def grouped(bench: Benchmark) -> list[tuple[dict[str, str], dict[str, float | None]]]:
    """Rows keyed by every parameter but ``engine``, each with the value per engine, in asv's order."""
    out: dict[tuple[tuple[str, str], ...], dict[str, float | None]] = {}
    for params, value in bench.rows:
        key = tuple((k, v) for k, v in params.items() if k != "engine")
        out.setdefault(key, {})[_unquote(params.get("engine", "'?'"))] = value
    return [(dict(k), v) for k, v in out.items()]


def table(bench: Benchmark) -> str:
    others = [n for n in bench.param_names if n != "engine"]
    head = others + ["zarr", "zarrmax", "zarrmax advantage"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for params, per_engine in grouped(bench):
        z, m = per_engine.get("zarr"), per_engine.get("zarrmax")
        adv = advantage(z, m, bench)
        cells = [_unquote(params[n]) for n in others]
        cells += [fmt(z, bench), fmt(m, bench), "" if adv is None else f"{adv:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe(bench: Benchmark | rh.Method) -> str:
    direction = "higher is better" if bench.higher_is_better else "lower is better"
    what = {"time": "wall time", "peakmemory": "peak resident memory of the whole benchmark process",
            "memory": "size of the returned object"}.get(bench.kind, bench.unit or bench.kind)
    return f"{what}, {direction}"


def short(label: str) -> str:
    """A layout name short enough for an axis ("int64, 1 MB chunks in 64 MB shards" -> "1MB/64MB")."""
    for old, new in (("float32 cube, ", "cube\n"), ("int64, ", ""), (" MB", "MB"), (" chunks in ", "/"),
                     (" chunks", ""), (" shards", "")):
        label = label.replace(old, new)
    return label


def plot(benches: list[Benchmark], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    shown = [b for b in benches if any(v is not None and not math.isnan(v) for _, v in b.rows)]
    if not shown:
        return
    ncols = 2
    nrows = math.ceil(len(shown) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7 * ncols, 3.8 * nrows), squeeze=False)
    for ax, bench in zip(axes.flat, shown, strict=False):
        rows = grouped(bench)
        others = [n for n in bench.param_names if n != "engine"]
        labels = ["\n".join(short(_unquote(p[n])) for n in others) or "-" for p, _ in rows]
        x = np.arange(len(rows))
        width = 0.38
        scale, unit = 1.0, bench.unit
        if bench.kind == "time":
            scale, unit = 1e3, "ms"
        elif bench.kind in ("peakmemory", "memory") or bench.unit == "bytes":
            scale, unit = 1 / 2**20, "MiB"
        for i, engine in enumerate(ENGINES):
            vals = [(per.get(engine) or float("nan")) * scale for _, per in rows]
            ax.bar(x + (i - 0.5) * width, vals, width, label=f"engine={engine!r}")
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_ylabel(unit)
        ax.set_title(f"{bench.name.split('.', 1)[-1]}\n({describe(bench)})", fontsize=8)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(machine: str, machine_info: dict[str, Any], head: dict[str, Any], benches: list[Benchmark],
           plot_path: Path | None, out_path: Path) -> str:
    date = dt.datetime.fromtimestamp((head.get("date") or 0) / 1e3, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    info = _machine(machine_info)
    lines = [
        "# Performance: continuous benchmarks (asv)",
        "",
        "Generated by `asv_bench/tables/perf_report.py` from airspeed velocity results; do not edit by hand. "
        "Regenerate with `.venv/bin/python -m asv_bench.tables.perf_report` after an `asv run` (see `asv_bench/`).",
        "",
        f"- commit `{head['commit_hash'][:12]}` (committed {date})",
        f"- machine `{machine}`: {info}",
        f"- environment(s): {', '.join(f'`{e}`' for e in head['envs'])}",
        "",
        "Every benchmark runs both engines in the same run. \"zarrmax advantage\" is how many times better "
        "engine=\"zarrmax\" does than engine=\"zarr\": zarr / zarrmax for times, memory and request counts, "
        "zarrmax / zarr for GB/s and ratios. `n/a`: skipped (a missing service, GPU or package); `failed`: the "
        "benchmark raised. The benchmarks and their data are described in `asv_bench/benchmarks/`; read arrays are "
        "64 MiB each unless the run set `ZARRMAX_ASV_MIB`.",
        "",
    ]
    if plot_path is not None and plot_path.exists():
        rel = os.path.relpath(plot_path, out_path.parent)
        lines += [f"![zarr and zarrmax per benchmark]({Path(rel).as_posix()})", ""]
    for bench in benches:
        note = NOTES.get(bench.name.rsplit(".", 1)[-1], "")
        doc = (note[0].upper() + note[1:] + " " if note else "") + f"Unit: {describe(bench)}."
        if not any(v is not None and not math.isnan(v) for _, v in bench.rows):
            lines += [f"## `{bench.name}`", "", doc + " Skipped on this machine (every parameter combination).", ""]
            continue
        lines += [f"## `{bench.name}`", "", doc, "", table(bench), ""]
    return "\n".join(lines)


# -- the history over releases ------------------------------------------------------------------------------

WORKING_TREE = (
    "The working tree (0.8.0, unreleased) is left out: it has no commit for asv to build, it changes under other "
    "work while a history runs, and `asv run --python=same` would measure it in `.venv`, whose dependencies are "
    "not those of asv's environment, so a difference from 0.7.0 could come from either. Compare it with the "
    "newest release by `asv continuous` once it is committed, or add its commit to a history run after it is "
    "tagged."
)


@dataclass
class History:
    releases: list[rh.Release]
    results: dict[str, dict[str, Any]]  # commit -> its result file
    methods: dict[str, rh.Method]
    thresholds: dict[str, rh.Noise]  # benchmark -> its noise
    runs: int  # runs of the newest release compared for noise
    regressions: list[rh.Regression]
    records: dict[str, dict[str, Any]]  # step -> record (release_runs)


def load_history(args: argparse.Namespace, meta: dict[str, Any], machine: str) -> History | None:
    releases = rh.releases(args.releases)
    results = {r.commit: d for r in releases if (d := rh.result_file(args.results / machine, r.commit)) is not None}
    if not results:
        return None
    records = {p.stem: _load(p) for p in sorted(args.logs.glob("*.json"))}
    # the history's log last: its reason wins for the commit whose result the page shows
    logs = sorted(args.logs.glob("rerun-*.log")) + [args.logs / "history.log"]
    regexes = rh.bench_regexes(records.get("history", {}).get("argv", []))
    methods = rh.collect(releases, results, meta, rh.read_failures(logs, list(meta)), regexes)
    newest = releases[-1].commit
    reruns = [_load(p) for p in sorted((args.reruns / machine).glob(f"{newest[:8]}-*.json"))]
    thresholds = rh.noise(newest, results.get(newest), reruns, meta, methods, releases)
    runs = len(reruns) + (newest in results)
    return History(releases, results, methods, thresholds, runs, rh.regressions(methods, releases, thresholds),
                   records)


def _params(others: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in others)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def read_rate(method: rh.Method, others: tuple[tuple[str, str], ...], mib: int | None) -> int | None:
    """Bytes read by one sample of ``ReadThroughput.time_read`` (None for other benchmarks)."""
    if mib is None or not method.name.endswith("ReadThroughput.time_read"):
        return None
    from asv_bench.shared.read_layouts import layouts

    by_name = {layout.name: layout.nbytes for layout in layouts(mib)}
    return by_name.get(dict(others).get("layout", ""))


def cell(method: rh.Method, point: rh.Point | None, flagged: rh.Regression | None, nbytes: int | None) -> str:
    if point is None:
        return "not run"
    if point.value is None:
        why = _md(point.reason)
        return (f"not runnable at this release (`{why}`)" if rh.not_runnable(point.reason)
                else f"failed at this release (`{why}`)")
    if math.isnan(point.value):
        return "skipped"
    text = fmt(point.value, method)
    if nbytes and point.value > 0:
        text += f" ({nbytes / point.value / 1e9:.2f} GB/s)"
    if flagged is not None:
        text += f" **regression: {flagged.factor:.2f}x vs {flagged.before.name}**"
    return text


def history_table(h: History, method: rh.Method, mib: int | None) -> str:
    engines = method.engines()
    others = [n for n in method.param_names if n != method.engine_param]
    baseline = next((e for e in ("zarr", "to_zarr") if e in engines), None)
    compare = baseline is not None and "zarrmax" in engines
    head = others + ["release"] + engines + (["zarrmax advantage"] if compare else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    flagged = {(r.others, r.engine, r.after.commit): r for r in h.regressions if r.method == method.name}
    for group in method.groups():
        nbytes = read_rate(method, group, mib)
        for i, release in enumerate(h.releases):
            cells = [dict(group).get(n, "") if i == 0 else "" for n in others] + [release.name]
            per = {e: method.series.get((group, e), {}).get(release.commit) for e in engines}
            if release.commit not in h.results:
                per = dict.fromkeys(engines)
            cells += [cell(method, per[e], flagged.get((group, e, release.commit)), nbytes) for e in engines]
            if compare:
                assert baseline is not None
                z, m = per[baseline], per["zarrmax"]
                adv = advantage(z.value if z else None, m.value if m else None, method)
                cells.append("" if adv is None else f"{adv:.2f}x")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def coverage(h: History) -> str:
    """Which benchmarks ran at which release: measured series out of those the history has."""
    head = ["benchmark"] + [r.name for r in h.releases]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method in h.methods.values():
        cells = [f"`{method.name.split('.', 1)[-1]}`"]
        for release in h.releases:
            got = [p for s in method.series.values() if (p := s.get(release.commit)) is not None]
            ok = sum(1 for p in got if rh.measured(p))
            n = len(method.series)
            cells.append("not run" if release.commit not in h.results else
                         "all" if ok == n else "none" if ok == 0 else f"{ok} of {n}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _step(record: dict[str, Any]) -> str:
    took = (record["end"] - record["start"]) / 60
    mib = f"ZARRMAX_ASV_MIB={record['zarrmax_asv_mib']}, " if record.get("zarrmax_asv_mib") else ""
    low, high, mean = record["load_1min_min"], record["load_1min_max"], record["load_1min_mean"]
    load = (f"load average (1 min) {record['load_start'][0]:.1f} at the start, {record['load_end'][0]:.1f} at the "
            f"end, {low:.1f} to {high:.1f} (mean {mean:.1f}) {record.get('load_note', 'sampled every 30 s')}")
    cores = record.get("nproc", "?")
    return f"`{record['command']}` ({mib}{_when(record['start'])}, {took:.0f} min; {load}, on {cores} cores)"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def describe_noise(h: History, n: rh.Noise) -> str:
    parts = []
    if n.reruns_n:
        parts.append(f"the {h.runs} runs of {h.releases[-1].name} differ by up to {n.reruns:.2f}x over "
                     f"{_count(n.reruns_n, 'combination')}")
    if n.baseline_n:
        parts.append(f"the zarr engine between consecutive releases by up to {n.baseline:.2f}x over "
                     f"{_count(n.baseline_n, 'combination')}")
    return f"{n.threshold:.2f}x ({'; '.join(parts)})"


def regressions_section(h: History) -> list[str]:
    newest = h.releases[-1].name
    lines = ["## Regressions", ""]
    if not h.thresholds:
        return lines + [f"Not assessed: no rerun of {newest} and no baseline series to measure run-to-run noise "
                        "with (`python -m asv_bench.shared.release_runs --steps rerun`).", ""]
    lines += [
        "Rule: a release regresses a benchmark (one parameter combination, one engine) when it does worse than "
        "the nearest earlier release that measured it by more than that benchmark's **noise threshold**, and, "
        "where asv recorded quartiles (time benchmarks), the two interquartile ranges of the samples do not "
        "overlap. \"Worse\" is slower or more requests. The noise threshold of a benchmark is the largest "
        "difference (ratio larger / smaller, over all its parameter combinations and engines) seen where no "
        f"code of the package changed: between any two of the {h.runs} runs of {newest} (the history's and its "
        "reruns: one commit, the same settings, at different times), and, for time benchmarks, between "
        "consecutive releases of the zarr engine (`to_zarr` for writes), which runs zarr-python's code, the same at "
        "every release in the one environment. For request counts only the reruns count; it is 1.00x when every "
        "run sent the same requests, so any increase is listed. So a baseline column cannot regress by this rule, "
        "and a zarrmax change must exceed the largest swing the machine produced on its own.",
        "",
    ]
    if not h.regressions:
        return lines + ["None: no release does worse than the release before it beyond the noise threshold.", ""]
    order = [x.commit for x in h.releases]
    for r in sorted(h.regressions, key=lambda r: (order.index(r.after.commit), r.method)):
        method = h.methods[r.method]
        where = _params(r.others)
        lines.append(f"- `{r.method.split('.', 1)[-1]}` ({where + '; ' if where else ''}{r.engine}): "
                     f"{r.before.name} {fmt(r.old.value, method)} -> {r.after.name} {fmt(r.new.value, method)}, "
                     f"{r.factor:.2f}x worse (threshold {r.threshold:.2f}x)")
    return lines + [""]


def render_history(h: History, machine: str, machine_info: dict[str, Any], plot_path: Path | None,
                   out_path: Path, env_root: Path) -> str:
    history = h.records.get("history")
    mib = history.get("zarrmax_asv_mib") if history else None
    versions = rh.env_versions(env_root, ("numpy", "xarray", "zarr", "dask", "numcodecs", "obstore"))
    lines = [
        "# Performance over releases (asv)",
        "",
        "Generated by `asv_bench/tables/perf_report.py` from airspeed velocity results; do not edit by hand. "
        "Regenerate with `.venv/bin/python -m asv_bench.shared.release_runs` (the runs, below) then "
        "`.venv/bin/python -m asv_bench.tables.perf_report`.",
        "",
        *regressions_section(h),
        "## How this was measured",
        "",
        f"- releases: {', '.join(f'{r.name} (`{r.commit[:7]}`)' for r in h.releases)} (`asv_bench/releases.txt`, "
        "named by their tags)",
        f"- machine `{machine}`: {_machine(machine_info)}",
    ]
    if history:
        lines.append(f"- history: {_step(history)}")
    for name in sorted(k for k in h.records if k.startswith("rerun")):
        lines.append(f"- {name} ({h.releases[-1].name} again, for the noise): {_step(h.records[name])}")
    if versions:
        lines.append("- one asv virtualenv (Python 3.12) for every release, each release's wheel installed in turn "
                     "with its `[test]` extras: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    lines += [
        f"- `ZARRMAX_ASV_MIB={mib}`: the read and write benchmarks' arrays are {mib} MiB (the float32 cube 64 MiB), "
        "the same for every release" if mib else "- `ZARRMAX_ASV_MIB`: not recorded",
        "",
        "The subset (`SUBSET` in `asv_bench/shared/release_runs.py`) is a few parameter combinations of every area "
        "of the suite, both engines each: open latency (`OpenManyVariables`, `OpenTree`), request counts "
        "(`OpenRequests`, `OpenTreeRequests`, `AccessRequests`, `WriteRequests`), read throughput "
        "(`ReadThroughput.time_read`, with the GB/s it implies), writes (`WriteThroughput`) and access patterns "
        "(`AccessPatterns`); the whole suite per release would take hours on this machine. The machine is shared "
        "with other work, so the noise threshold is measured rather than assumed. Cells: a value (time benchmarks: "
        "asv's median of the samples); `not runnable at this release (why)`: the benchmark or its harness needs "
        "something the release does not have (an import or an argument; the error is quoted from the run's log); "
        "`failed at this release (why)`: any other error; `skipped`: asv skipped it; `not run`: no result for the "
        "release. \"zarrmax advantage\" is how many times better zarrmax does than the zarr engine in the same "
        "run. The html site of the same results: `cd asv_bench && ../.venv/bin/asv publish` (in `.asv/html`).",
        "",
        WORKING_TREE,
        "",
        "## Which benchmarks ran at which release",
        "",
        "Measured parameter combinations and engines, out of those in the history.",
        "",
        coverage(h),
        "",
    ]
    if plot_path is not None and plot_path.exists():
        rel = os.path.relpath(plot_path, out_path.parent)
        lines += [f"![each benchmark over releases, per engine]({Path(rel).as_posix()})", ""]
    for method in h.methods.values():
        note = NOTES.get(method.name.rsplit(".", 1)[-1], "")
        doc = (note[0].upper() + note[1:] + " " if note else "") + f"Unit: {describe(method)}."
        if method.name in h.thresholds:
            doc += f" Noise threshold {describe_noise(h, h.thresholds[method.name])}."
        lines += [f"## `{method.name}`", "", doc, "", history_table(h, method, mib), ""]
    return "\n".join(lines)


def _machine(machine_info: dict[str, Any]) -> str:
    shown = dict(machine_info)
    if str(shown.get("ram", "")).isdigit():
        shown["ram"] = f"{int(shown['ram']) / 2**30:.0f} GiB"
    return ", ".join(f"{k} {shown[k]}" for k in ("cpu", "num_cpu", "ram", "os") if shown.get(k))


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=ROOT / ".asv" / "results")
    parser.add_argument("--machine", help="machine name (default: the one with the newest results)")
    parser.add_argument("--releases", type=Path, default=ROOT / "asv_bench" / "releases.txt",
                        help="the history's commits, oldest first (asv's HASHFILE format)")
    parser.add_argument("--logs", type=Path, default=ROOT / ".asv" / "logs",
                        help="the runs' logs and records (asv_bench.shared.release_runs)")
    parser.add_argument("--reruns", type=Path, default=ROOT / ".asv" / "rerun",
                        help="result files of reruns of the newest release (the noise)")
    parser.add_argument("--commit", help="one commit's results instead of the history (hash or prefix; "
                        "default: the history, or the newest commit where no release has results)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dev" / "performance-asv.md")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "dev" / "performance-asv.png")
    parser.add_argument("--no-plot", action="store_true")


def run(session: Session) -> int:
    args = session.args

    if not args.results.is_dir():
        print(f"no asv results directory {args.results}: run `cd asv_bench && asv run` first", file=sys.stderr)
        return 1
    meta_path = args.results / "benchmarks.json"
    meta = _load(meta_path) if meta_path.exists() else {}
    machine, files = result_files(args.results, args.machine)
    machine_info = _load(args.results / machine / "machine.json")
    plot_path = None if args.no_plot else args.plot.resolve()
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    history = None if args.commit else load_history(args, meta, machine)
    if history is not None:
        if plot_path is not None:
            release_plot.draw(history, plot_path, short)
        text = render_history(history, machine, machine_info, plot_path, out, args.results.parent / "env")
        noise = ", ".join(f"{n.rsplit('.', 1)[-1]} {t.threshold:.2f}x" for n, t in history.thresholds.items())
        print(f"{len(history.regressions)} regression(s) beyond noise; noise thresholds: {noise or 'none'}")
    else:
        head, benches = collect(files, meta, args.commit)
        ordered = [benches[n] for n in sorted(benches)]
        if plot_path is not None:
            plot(ordered, plot_path)
        text = render(machine, machine_info, head, ordered, plot_path, out)
    out.write_text(text)
    print(f"wrote {out}" + (f" and {plot_path}" if plot_path is not None and plot_path.exists() else ""))
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
