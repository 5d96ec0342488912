"""The proven search's time at this checkout against another one (the commit before a change), in one run.

    .venv/bin/python -m asv_bench.tables.advise_search_ab OTHER_CHECKOUT [--case TEXT ...] [--repeat 3]
        [--probes FILE] [--markdown FILE] [--points N ...]

Each case (a row of `asv_bench.tables.advise_search_time`, named "array / case / costs"; by default the five that
took over 2 s at 1a5762f) runs in a fresh process per checkout, the two alternating,
``--repeat`` times, under the same costs: the probes of ``--probes`` (default this checkout's validation log),
whatever the other checkout's log holds. Per case: both medians, their ratio, the layouts costed and whether both
picked the same layout with the same score. ``git worktree add /tmp/before 1a5762f`` makes the other checkout.
``--points N`` lets a ``--case`` name a pointwise read of `advise_search_time --points N` (e.g. "4-D built-in /
30 random points / minio"), built here and handed to both checkouts as plain lists (older ones have no such cases).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from asv_bench.shared.timing import machine_state

HERE = Path(__file__).parents[2]
SLOW = ("4-D built-in / random-batch / minio", "set 2 packed-4d / batch / minio",
        "set 2 packed-4d / mix training / minio", "set 2 packed-4d / mix forecast-desk / minio",
        "set 2 packed-4d / mix forecast-desk / assumed")

# run in a fresh interpreter with the checkout first on sys.path: its own advise_search_time and package
_ONE = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from asv_bench.tables import advise_search_time as t
from xarray_zarrmax.advise import advisor
advisor.SEARCH_LAYOUTS = advisor.SEARCH_SECONDS = None  # the proof
t.PROBES = Path(sys.argv[3])
costs = t.probed_costs()
cases = t.cases()
if len(sys.argv) > 4:  # a pointwise read built by the calling checkout (`point_cases`), as plain lists
    from xarray_zarrmax.advise import Points
    given = json.loads(Path(sys.argv[4]).read_text())
    read = Points(given.pop("indices"))
    cases = [{**given, "shape": tuple(given["shape"]), "extra": {}, "patterns": {given["case"]: (1.0, read)}}]
for case in cases:
    for kind, c in costs.items():
        if f"{case['array']} / {case['case']} / {kind}" != sys.argv[2]:
            continue
        start = time.perf_counter()
        ranked, outcome = advisor.search(case["shape"], case["dims"], case["itemsize"], case["patterns"], costs=c,
                                         reader=t.reader_for(c), variable="v", **case["extra"])
        print(json.dumps({"seconds": time.perf_counter() - start, "costed": outcome.costed,
                          "best": str(ranked[0].layout), "score": ranked[0].score}))
"""


def once(checkout: Path, case: str, probes: Path, points: Path | None = None) -> dict[str, Any]:
    """One search of ``case`` with ``checkout``'s code, in its own process (``points``: the case, a pointwise
    read, as `point_case_file` wrote it)."""
    command = [sys.executable, "-c", _ONE, str(checkout), case, str(probes), *([str(points)] if points else [])]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
    if not out:
        raise SystemExit(f"expected a case named like {case!r} in {checkout}. Got no such case.")
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def point_case_file(counts: list[int], case: str, folder: Path) -> Path | None:
    """The case named ``case`` ('array / case / costs') among `advise_search_time.point_cases` of ``counts``,
    written to ``folder`` as JSON (its points as lists) for a checkout that has no such cases; None if not one."""
    from asv_bench.tables.advise_search_time import point_cases

    for found in point_cases(counts):
        if case.startswith(f"{found['array']} / {found['case']} / "):
            read = found["patterns"][found["case"]][1]
            path = folder / f"{found['case'].replace(' ', '_')}.json"
            path.write_text(json.dumps({"array": found["array"], "case": found["case"], "shape": found["shape"],
                                        "dims": list(found["dims"]), "itemsize": found["itemsize"],
                                        "indices": {d: [int(i) for i in ix] for d, ix in read.indices.items()}}))
            return path
    return None


def summary(case: str, before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians, their ratio, layouts costed and whether the picks agree, of one case's runs."""
    b, a = statistics.median(r["seconds"] for r in before), statistics.median(r["seconds"] for r in after)
    same = {(r["best"], round(r["score"], 12)) for r in before} == {(r["best"], round(r["score"], 12)) for r in after}
    return {"case": case, "before_s": b, "after_s": a, "ratio": b / a, "before_costed": before[0]["costed"],
            "after_costed": after[0]["costed"], "same_pick": same, "before": before, "after": after}


def markdown(result: dict[str, Any]) -> str:
    load = [result["machine_before"].get("load_average"), result["machine_after"].get("load_average")]
    lines = [f"Command: `{result['command']}`; this checkout against {result['other']}; medians of "
             f"{result['repeat']}, each run a fresh process, alternating; load average before and after: {load[0]}, "
             f"{load[1]}.", "",
             "| case | before s | after s | before / after | layouts costed | same pick and score |",
             "|---|---:|---:|---:|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['case']} | {r['before_s']:.2f} | {r['after_s']:.2f} | {r['ratio']:.2f}x | "
                     f"{r['before_costed']} / {r['after_costed']} | {'yes' if r['same_pick'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="the checkout to compare with (a git worktree)")
    parser.add_argument("--case", action="append", help="a case, 'array / case / costs' (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--probes", type=Path, default=HERE / "docs" / "dev" / "logs" / "advise_validation.json")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--points", type=int, nargs="+", default=[],
                        help="the counts of `advise_search_time --points` cases a --case may name")
    args = parser.parse_args(argv)
    if not (args.other / "xarray_zarrmax").is_dir():
        raise SystemExit(f"expected a checkout of xarray_zarrmax at {args.other}. Got no xarray_zarrmax there.")
    chosen = list(args.case or SLOW)
    before_state = machine_state()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {"before": [], "after": []} for c in chosen}
    with tempfile.TemporaryDirectory() as folder:
        points = {c: point_case_file(args.points, c, Path(folder)) for c in chosen}
        for _ in range(args.repeat):
            for case in chosen:
                runs[case]["before"].append(once(args.other, case, args.probes, points[case]))
                runs[case]["after"].append(once(HERE, case, args.probes, points[case]))
                print(f"{case}: {runs[case]['before'][-1]['seconds']:.2f} s before, "
                      f"{runs[case]['after'][-1]['seconds']:.2f} s after", file=sys.stderr, flush=True)
    result = {"command": " ".join(sys.argv), "other": str(args.other), "repeat": args.repeat,
              "machine_before": before_state, "machine_after": machine_state(),
              "rows": [summary(c, r["before"], r["after"]) for c, r in runs.items()]}
    text = markdown(result)
    if args.markdown:
        args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
