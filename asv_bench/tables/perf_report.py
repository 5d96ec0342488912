"""Regenerate docs/dev/performance-asv.md (markdown tables) and docs/dev/performance-asv.png from asv's results.

    .venv/bin/python -m asv_bench.tables.perf_report [--results .asv/results] [--machine NAME] [--commit HASH]
                                                     [--out docs/dev/performance-asv.md]
                                                     [--plot docs/dev/performance-asv.png]

Reads the JSON result files asv writes (``asv run``, ``asv continuous``, or ``asv run --python=same
--set-commit-hash HASH``: a ``--python=same`` run without it is not saved): by default the machine with the
newest results, and on it the newest commit that has results (by commit date; every environment's file for
that commit is merged, the newest file winning where two hold the same benchmark). Benchmark metadata
(parameter names, units) comes from ``benchmarks.json`` beside them. Every benchmark of the suite has
``engine`` as a parameter, so each table puts engine="zarr" and engine="zarrmax" side by side with how many
times better zarrmax does.
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


def fmt(value: float | None, bench: Benchmark) -> str:
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


def advantage(zarr: float | None, zarrmax: float | None, bench: Benchmark) -> float | None:
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


def describe(bench: Benchmark) -> str:
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
    shown = dict(machine_info)
    if str(shown.get("ram", "")).isdigit():
        shown["ram"] = f"{int(shown['ram']) / 2**30:.0f} GiB"
    info = ", ".join(f"{k} {shown[k]}" for k in ("cpu", "num_cpu", "ram", "os") if shown.get(k))
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


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=ROOT / ".asv" / "results")
    parser.add_argument("--machine", help="machine name (default: the one with the newest results)")
    parser.add_argument("--commit", help="commit hash or prefix (default: the newest with results)")
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
    head, benches = collect(files, meta, args.commit)
    ordered = [benches[n] for n in sorted(benches)]
    plot_path = None if args.no_plot else args.plot.resolve()
    if plot_path is not None:
        plot(ordered, plot_path)
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(machine, machine_info, head, ordered, plot_path, out))
    print(f"wrote {out}" + (f" and {plot_path}" if plot_path is not None and plot_path.exists() else ""))
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
