"""How long the advisor's proven search takes, per pattern and per mix, on 4-D (and the other validation) arrays.

    .venv/bin/python -m asv_bench.tables.advise_search_time [--repeat 3] [--probes FILE] [--markdown FILE]
        [--json FILE] [--case TEXT ...] [--points N ...]

Issue 42 asks for "any pattern on a 4-D array in under 2 s". For each case the search of the whole grid runs
with no budget (`tuning.SEARCH_LAYOUTS` and `tuning.SEARCH_SECONDS` lifted), so that what is timed is the proof,
not a cut-off: wall seconds (median of ``--repeat``), layouts costed, and whether the search was complete.
Costs are fixed, no store is probed: the probes of the committed validation run (local disk, and MinIO behind
+20 ms, from docs/dev/logs/advise_validation.json; ``--probes``: another run's log), and `Costs()` (a remote
store assumed). ``--case`` keeps the cases whose "array / case" holds the text. Cases:

- every built-in pattern alone on a (365, 10, 181, 360) float32 array;
- every pattern and mix of both validation sets (`asv_bench.shared.advise_sets`), on their own arrays;
- with ``--points N``: pointwise reads of N distinct random points on the 4-D array, along every dimension
  ("N random points") and along lat and lon, every time and level ("profiles at N points"), seeded (`point_cases`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from asv_bench.shared.timing import cpu_reference, machine_state

PROBES = Path(__file__).parents[2] / "docs" / "dev" / "logs" / "advise_validation.json"
BUILT_IN = ("timeseries", "map", "region-mean", "map-mean", "full-scan", "random-batch")
SHAPE4, DIMS4 = (365, 10, 181, 360), ("time", "lev", "lat", "lon")


def probed_costs(probes: Path | None = None) -> dict[str, Any]:
    """A validation run's probes of dataset "packed-4d" (local, minio) as `Costs` (``probes``: its JSON log,
    default `PROBES`), and `Costs()`."""
    from xarray_zarrmax.advise import Costs

    found = json.loads((probes or PROBES).read_text())
    packed = next(d for d in found["datasets"] if d["name"] == "packed-4d")["probes"]
    out: dict[str, Any] = {"assumed": Costs()}
    for kind, p in packed.items():
        fields = {k: v for k, v in p.items() if k not in ("local", "spread")}
        out[kind] = Costs.from_dict({"format": "xarray_zarrmax.advise.Costs", "version": 1,
                                     "store": "local" if p["local"] else "remote", **fields,
                                     "spread": {n: [lo, hi] for n, lo, hi in p["spread"]}})
    return out


def reader_for(costs: Any) -> Any:
    """The reader `advise` builds from the configuration in force."""
    from xarray_zarrmax.advise import Reader
    from xarray_zarrmax.config import get_config

    c = get_config()
    return Reader(concurrency=c.concurrency, full_shard_fraction=c.full_shard_fraction, coalesce_gap=c.coalesce_gap,
                  split_size=c.split_size, inflight_bytes=c.inflight_bytes, task_bytes=c.task_bytes,
                  threads=c.threads, local=costs.local)


def cases() -> list[dict[str, Any]]:
    """(label, shape, dims, itemsize, patterns, extra keyword arguments) of every case."""
    from asv_bench.shared.advise_sets import datasets
    from asv_bench.tables.advise_validation import Advisor

    out = [{"array": "4-D built-in", "case": name, "shape": SHAPE4, "dims": DIMS4, "itemsize": 4,
            "patterns": {name: 1.0}, "extra": {}} for name in BUILT_IN]
    api = Advisor()
    for data in datasets(quick=False):
        itemsize = {"packed-4d": 2, "stations-2d": 8}.get(data.name, 4)
        mixes = [(p.name, {p.name: 1.0}) for p in data.patterns] + [(f"mix {m}", w) for m, w in data.mixes.items()]
        for name, weights in mixes:
            patterns, extra = api.patterns(data, weights)
            out.append({"array": f"set {data.validation_set} {data.name}", "case": name, "shape": data.shape,
                        "dims": data.dims, "itemsize": itemsize, "patterns": patterns, "extra": extra})
    return out


def point_cases(counts: list[int], seed: int = 0) -> list[dict[str, Any]]:
    """Per count N, N distinct points drawn at random (``seed``) on the 4-D built-in array: along every dimension,
    and along (lat, lon) with every time and level (the same N cells of the map)."""
    import numpy as np

    from xarray_zarrmax.advise import Points

    out = []
    for n in counts:
        rng = np.random.default_rng(seed)
        cells = np.unravel_index(rng.choice(math.prod(SHAPE4), size=n, replace=False), SHAPE4)
        columns = np.unravel_index(rng.choice(SHAPE4[2] * SHAPE4[3], size=n, replace=False), SHAPE4[2:])
        for name, indices in ((f"{n} random points", dict(zip(DIMS4, cells, strict=True))),
                              (f"profiles at {n} points", dict(zip(DIMS4[2:], columns, strict=True)))):
            out.append({"array": "4-D built-in", "case": name, "shape": SHAPE4, "dims": DIMS4, "itemsize": 4,
                        "patterns": {name: (1.0, Points(indices))}, "extra": {}})
    return out


def run(repeat: int, probes: Path | None = None, only: list[str] | None = None,
        points: list[int] | None = None) -> dict[str, Any]:
    from xarray_zarrmax.advise import advisor

    advisor.SEARCH_LAYOUTS = advisor.SEARCH_SECONDS = None  # the proof, whatever it costs
    costs = probed_costs(probes)
    rows = []
    before = machine_state()
    reference = cpu_reference()
    for case in cases() + point_cases(points or []):
        if only and not any(text in f"{case['array']} / {case['case']}" for text in only):
            continue
        for kind, c in costs.items():
            times, outcome, best = [], None, None
            for _ in range(repeat):
                start = time.perf_counter()
                ranked, outcome = advisor.search(case["shape"], case["dims"], case["itemsize"], case["patterns"],
                                                 costs=c, reader=reader_for(c), variable="v", **case["extra"])
                times.append(time.perf_counter() - start)
                best = ranked[0]
            assert outcome is not None and best is not None
            row = {"array": case["array"], "case": case["case"], "costs": kind, "seconds": statistics.median(times),
                   "runs": times, "costed": outcome.costed, "complete": outcome.complete, "best": str(best.layout)}
            print(f"{row['array']:>20} {row['case']:>22} {kind:>8} {row['seconds']:7.2f} s {row['costed']:6d} "
                  f"costed {'proven' if row['complete'] else 'NOT proven'}", file=sys.stderr, flush=True)
            rows.append(row)
    return {"command": " ".join(sys.argv), "repeat": repeat, "probes": str(probes or PROBES), "machine_before": before,
            "machine_after": machine_state(), "cpu_reference_s": [reference, cpu_reference()], "rows": rows}


def markdown(result: dict[str, Any]) -> str:
    load = [result["machine_before"].get("load_average"), result["machine_after"].get("load_average")]
    lines = [f"Command: `{result['command']}`; median of {result['repeat']}; load average before and after: "
             f"{load[0]}, {load[1]}"
             + ("; CPU reference before and after {:.3f} s, {:.3f} s (`asv_bench.shared.timing.cpu_reference`: compare "
                "tables of other machines by it)".format(*result["cpu_reference_s"]) if "cpu_reference_s" in result
                else "") + ".", "",
             "| array | pattern or mix | costs | seconds | layouts costed | proven | best |",
             "|---|---|---|---:|---:|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['array']} | {r['case']} | {r['costs']} | {r['seconds']:.2f} | {r['costed']} | "
                     f"{'yes' if r['complete'] else 'no'} | {r['best']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--probes", type=Path, help="another validation run's JSON log, whose probes to cost under")
    parser.add_argument("--case", action="append", help="only the cases whose 'array / case' holds this text")
    parser.add_argument("--points", type=int, nargs="+", help="add pointwise reads of this many random points")
    args = parser.parse_args(argv)
    result = run(args.repeat, args.probes, args.case, args.points)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    if args.markdown:
        args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
