"""Benchmarks over releases (issue #44): the asv suite on every commit of ``asv_bench/releases.txt``, the newest
release run again apart from the history (run-to-run noise), and ``asv publish``.

    .venv/bin/python -m asv_bench.shared.release_runs [--steps history,rerun,rerun,publish] [--mib 16]
    .venv/bin/python -m asv_bench.tables.perf_report        # then: docs/dev/performance-asv.md from the results

A whole suite per release takes hours on a small machine, so every step runs `SUBSET`: a few parameter
combinations of each area the issue names (open latency, request counts, read throughput, writes, access
patterns), both engines each, with `SETTINGS`. ``ZARRMAX_ASV_MIB`` is the same for every step (results at
different sizes are not comparable). Steps:

- ``history``: ``asv run HASHFILE:releases.txt`` into ``.asv/results/<machine>/`` (what ``asv publish`` shows);
- ``rerun`` (twice by default): the newest release once more; its result file is moved to
  ``.asv/rerun/<machine>/`` (numbered) and the history's restored, so the history holds one result per release
  and the reruns say how far two runs of the same commit differ on this machine
  (`asv_bench.shared.release_history.noise`);
- ``publish``: ``asv publish`` (html to ``.asv/html``).

Each step writes its console output to ``.asv/logs/<step>.log`` (``--show-stderr``: the tracebacks the report
quotes for benchmarks an old release cannot run; asv's result files keep no error text) and a record to
``.asv/logs/<step>.json``: the command, ``ZARRMAX_ASV_MIB``, start and end, and the load average sampled every
30 s. A failed benchmark does not stop a step (asv exits non-zero then; the step goes on).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from asv_bench.shared.process import ROOT

ASV_DIR = ROOT / "asv_bench"
RELEASES = ASV_DIR / "releases.txt"
LOGS = ROOT / ".asv" / "logs"
RERUNS = ROOT / ".asv" / "rerun"
RESULTS = ROOT / ".asv" / "results"
MIB = 16  # the arrays of the read and write benchmarks; the same for every release of a history

# What each step runs (asv's --bench regexes, on "name(param, ...)"), and why these combinations:
SUBSET = [
    # open latency: both engines, unconsolidated and consolidated, behind 20 ms (S3-like) latency
    r"OpenManyVariables\.time_open_dataset\('(zarr|zarrmax)', (False|True), 20\)",
    r"OpenTree\.time_open_datatree\('(zarr|zarrmax)', (False|True), 20\)",
    # request counts: every combination (cheap, and deterministic)
    r"OpenRequests\.track_open_requests",
    r"OpenTreeRequests\.track_open_tree_requests",
    r"AccessRequests\.track_requests\('(zarr|zarrmax)', 'tiles in slab shards', '(timeseries|map)', 'minio'\)",
    r"WriteRequests\.track_write_requests",
    # read throughput: an unsharded and a sharded layout, local directory and MinIO
    r"ReadThroughput\.time_read\('(zarr|zarrmax)', '(int64, 0\.8 MB chunks|int64, 1 MB chunks in 64 MB shards)', "
    r"'(local|minio)'\)",
    # writes: xarray's to_zarr (the zarr engine) and zarrmax, sharded, local directory
    r"WriteThroughput\.time_write\('(to_zarr|zarrmax)', 'int64, 1 MB chunks in 64 MB shards', 'local'\)",
    # access patterns: the two opposite operations on small chunks in large shards, local and MinIO (+20 ms)
    r"AccessPatterns\.time_operation\('(zarr|zarrmax)', 'tiles in slab shards', '(timeseries|map)', "
    r"'(local|minio)'\)",
]
# asv's two rounds (processes) per combination, the history's interleaved across the releases (round 1 of every
# release, then round 2 of every release), so a change of the machine's load during the run reaches every
# release alike; 3 to 6 samples or 8 s a round; samples kept.
SETTINGS = ["-a", "processes=2", "--interleave-rounds", "-a", "repeat=(3,6,8.0)", "--record-samples",
            "--show-stderr"]


def release_hashes() -> list[str]:
    return [line.strip() for line in RELEASES.read_text().splitlines() if line.strip()]


def asv_command(*args: str) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "asv"), *args]


def run_args(commits: str) -> list[str]:
    bench = [arg for regex in SUBSET for arg in ("--bench", regex)]
    return ["run", commits, *bench, *SETTINGS]


def display(args: list[str], mib: int) -> str:
    """The asv command as the page shows it: run from asv_bench/, the --bench regexes named, not spelled."""
    shown, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--bench":
            skip = True
            if "<SUBSET>" not in shown:
                shown += ["--bench", "<SUBSET>"]
            continue
        shown.append(arg)
    line = shlex.join(["../.venv/bin/asv", *shown]).replace("'<SUBSET>'", "<SUBSET>")
    return f"cd asv_bench && ZARRMAX_ASV_MIB={mib} ZARRMAX_ASV_STRICT=1 {line}"


def environment(mib: int) -> dict[str, str]:
    env = dict(os.environ, ZARRMAX_ASV_MIB=str(mib), ZARRMAX_ASV_STRICT="1")
    # asv's virtualenv finds python3.12 on PATH; a pyenv shim there fails outside a pyenv-selected directory, so
    # the interpreter .venv was made from comes first.
    env["PATH"] = f"{Path(sys.base_prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def load_average() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def logged(step: str, args: list[str], mib: int) -> dict[str, Any]:
    """Run asv with ``args`` from asv_bench/, output to ``.asv/logs/<step>.log``, sampling the load average; the
    step's record (also written to ``.asv/logs/<step>.json``)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    samples: list[tuple[float, list[float]]] = []
    done = threading.Event()

    def sample() -> None:
        while True:
            samples.append((time.time(), load_average()))
            if done.wait(30):
                return

    command = asv_command(*args)
    record: dict[str, Any] = {
        "step": step, "command": display(args, mib), "argv": command, "zarrmax_asv_mib": mib, "start": time.time(),
        "load_start": load_average(), "nproc": os.cpu_count(),
    }
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with open(LOGS / f"{step}.log", "w") as log:
        code = subprocess.call(command, cwd=ASV_DIR, env=environment(mib), stdout=log, stderr=subprocess.STDOUT)
    done.set()
    sampler.join()
    one_minute = [s[1][0] for s in samples]
    record.update(end=time.time(), load_end=load_average(), returncode=code,
                  load_1min_min=min(one_minute), load_1min_max=max(one_minute),
                  load_1min_mean=sum(one_minute) / len(one_minute))
    (LOGS / f"{step}.json").write_text(json.dumps(record, indent=1))
    print(f"{step}: asv exited {code} after {record['end'] - record['start']:.0f} s; log {LOGS / (step + '.log')}")
    return record


def rerun(mib: int) -> None:
    """The newest release again, its result moved to ``.asv/rerun/<machine>/<file>.<n>.json``; the history's
    result for it put back."""
    newest = release_hashes()[-1]
    before = {p: p.read_bytes() for p in RESULTS.glob(f"*/{newest[:8]}-*.json")}
    n = 1 + max((int(p.suffixes[-2][1:]) for p in RERUNS.glob("*/*.json") if p.suffixes[-2][1:].isdigit()),
                default=0)
    step = f"rerun-{n}"
    started = time.time()
    logged(step, run_args(f"{newest}^!"), mib)
    for path in RESULTS.glob(f"*/{newest[:8]}-*.json"):
        if path.stat().st_mtime < started:
            continue
        kept = RERUNS / path.parent.name / f"{path.stem}.{n}.json"
        kept.parent.mkdir(parents=True, exist_ok=True)
        path.replace(kept)
        print(f"{step}: kept {kept}")
    for path, data in before.items():
        path.write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="history,rerun,rerun,publish",
                        help="comma-separated steps run in the order given, a step as often as named: history, "
                             "rerun, publish (default: history,rerun,rerun,publish)")
    parser.add_argument("--mib", type=int, default=MIB, help=f"ZARRMAX_ASV_MIB for every step (default {MIB})")
    parser.add_argument("--print", action="store_true", help="print the history step's asv command and exit")
    args = parser.parse_args(argv)
    if args.print:
        print(shlex.join(asv_command(*run_args(f"HASHFILE:{RELEASES.name}"))))
        return 0
    steps = [s for s in args.steps.split(",") if s]
    unknown = set(steps) - {"history", "rerun", "publish"}
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}")
    subprocess.run(asv_command("machine", "--yes"), cwd=ASV_DIR, check=True, stdout=subprocess.DEVNULL)
    for step in steps:
        if step == "history":
            logged("history", run_args(f"HASHFILE:{RELEASES.name}"), args.mib)
        elif step == "rerun":
            rerun(args.mib)
        else:
            logged("publish", ["publish"], args.mib)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
