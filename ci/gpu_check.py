"""The steps of ``ci/gpu_check.sh``: each in its own process with its own time limit, its output kept in a log
even when a later step fails, and the summary (markdown and JSON) rewritten after every step, so a run cut
short still leaves what it measured.

    python ci/gpu_check.py [--dry-run] [--out DIR] [--only env,tests,...]    (ci/gpu_check.sh calls it)
    python ci/gpu_check.py --step env|cluster [--dry-run]                   (one step's body, in-process)

Steps, in order (issue 45): env (nvidia-smi and versions), tests (``pytest -m gpu`` on the device), pipeline
(seed 004's workload, ``asv_bench/tables/gpu_pipeline.py``), cluster (a dask-cuda ``LocalCUDACluster`` read of
a sharded store, values checked), cpu_read (a short form of the CPU throughput table on this machine's cores).
``--dry-run``: the same steps on the NumPy stand-in (`HostDevice`, a CPU ``LocalCluster``) and small sizes,
so CI runs every step up to the first device call.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Step:
    key: str
    title: str
    limit_s: int
    argv: list[str]
    status: str = "not run"  # passed, failed (exit N), timed out, not run
    seconds: float = 0.0
    log: str = ""
    tables: list[str] = field(default_factory=list)  # the markdown table lines the step printed
    tail: str = ""


def steps(dry: bool, out: Path, scratch: Path) -> list[Step]:
    py = sys.executable
    here = str(Path(__file__).resolve())
    dry_flag = ["--dry-run"] if dry else []
    pipeline = (["--device", "host", "--scale", "0.125", "--repeat", "1"] if dry
                else ["--device", "cuda", "--repeat", "3"])
    cpu_read = (["--mib", "16", "--repeat", "1", "--layouts", "3"] if dry
                else ["--mib", "512", "--repeat", "3", "--layouts", "1,3,4"])
    return [
        Step("env", "a. nvidia-smi and versions", 30, [py, here, "--step", "env", *dry_flag]),
        Step("tests", "b. pytest -m gpu (values equal engine=\"zarr\" on the CPU)", 150,
             [py, "-m", "pytest", "tests", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra"]),
        Step("pipeline", "c. seed 004's workload against zarr enable_gpu() and zarr + NumPy, with stages", 180,
             [py, "-m", "asv_bench.tables.gpu_pipeline", *pipeline, "--dir", str(scratch / "pipeline"),
              "--json", str(out / "pipeline.json")]),
        Step("cluster", "d. dask-cuda LocalCUDACluster read of a sharded store, values checked", 90,
             [py, here, "--step", "cluster", *dry_flag, "--scratch", str(scratch / "cluster"),
              "--json", str(out / "cluster.json")]),
        Step("cpu_read", "e. CPU read throughput on this machine's cores (local disk, 3 layouts)", 150,
             [py, "-m", "asv_bench.tables.throughput", "--stores", "local", *cpu_read,
              "--stacks", "zarr,zarr_tuned,zarrs,tensorstore,zarrmax,zarrmax_dask",
              "--json", str(out / "cpu_read.json")]),
    ]


def run_step(step: Step, out: Path, env: dict[str, str]) -> None:
    """Run one step in its own process group; on its time limit, the whole group is killed."""
    log = out / f"{step.key}.log"
    step.log = log.name
    start = time.monotonic()
    with open(log, "w") as f:
        f.write(f"$ {' '.join(step.argv)}\n")
        f.flush()
        proc = subprocess.Popen(step.argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=step.limit_s)
            step.status = "passed" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            step.status = f"timed out after {step.limit_s} s"
    step.seconds = round(time.monotonic() - start, 1)
    text = log.read_text(errors="replace")
    step.tables = [line for line in text.splitlines() if line.startswith("|")]
    step.tail = "\n".join(text.splitlines()[-15:])


def write_summary(out: Path, dry: bool, all_steps: list[Step], started: float) -> None:
    setup = out / "setup.json"
    payload = {"dry_run": dry, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
               "seconds": round(time.time() - started, 1),
               "setup": json.loads(setup.read_text()) if setup.exists() else None,
               "steps": [asdict(s) for s in all_steps]}
    (out / "summary.json").write_text(json.dumps(payload, indent=1))
    lines = [f"# GPU check{' (dry run: the NumPy stand-in, no GPU)' if dry else ''}", "",
             f"Started {payload['started']}, {payload['seconds']} s so far.", ""]
    if payload["setup"]:
        lines += [f"Setup: {payload['setup'].get('status')} in {payload['setup'].get('seconds')} s "
                  f"({payload['setup'].get('packages')})", ""]
    lines += ["| step | status | seconds (limit) |", "|---|---|---|"]
    lines += [f"| {s.title} | {s.status} | {s.seconds} ({s.limit_s}) |" for s in all_steps]
    for s in all_steps:
        if s.status.startswith("not run"):
            continue
        lines += ["", f"## {s.title}", "", f"{s.status}; log `{s.log}`", ""]
        if s.key == "env":
            lines += ["```", *(out / s.log).read_text(errors="replace").splitlines(), "```"]
            continue
        lines += s.tables if s.key != "tests" else []
        if s.key == "tests" or not s.tables or s.status != "passed":
            lines += ["", "```", *s.tail.splitlines(), "```"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="the NumPy stand-in and small sizes: no GPU needed")
    parser.add_argument("--out", default=os.environ.get("OUT") or "build/gpu_check", help="where logs and summary go")
    parser.add_argument("--only", default="", help="comma-separated step keys (default: every step)")
    parser.add_argument("--budget", type=float, default=480,
                        help="seconds for all steps: each gets the lesser of its own limit and what is left, and a "
                             "step with under 20 s left is not run (default 480: the issue's 8 minutes)")
    parser.add_argument("--step", choices=("env", "cluster"), help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step == "env":
        return step_env(args.dry_run)
    if args.step == "cluster":
        return step_cluster(args.dry_run, Path(args.scratch), args.json)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="zarrmax-gpu-check-"))
    env = dict(os.environ, XARRAY_ZARRMAX_TEST_DEVICE="host" if args.dry_run else "cuda", PYTHONUNBUFFERED="1")
    all_steps = steps(args.dry_run, out, scratch)
    if args.only:
        unknown = set(args.only.split(",")) - {s.key for s in all_steps}
        if unknown:
            parser.error(f"--only takes {[s.key for s in all_steps]}. Got {sorted(unknown)}.")
    started = time.time()
    try:
        for step in all_steps:
            if args.only and step.key not in args.only.split(","):
                continue
            left = args.budget - (time.time() - started)
            if left < 20:
                step.status = "not run (out of the run's time budget)"
                continue
            step.limit_s = int(min(step.limit_s, left))
            print(f"gpu_check: {step.title} (limit {step.limit_s} s) ...", flush=True)
            run_step(step, out, env)
            print(f"gpu_check: {step.key}: {step.status} in {step.seconds} s; log {out / step.log}", flush=True)
            write_summary(out, args.dry_run, all_steps, started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    write_summary(out, args.dry_run, all_steps, started)
    print((out / "summary.md").read_text())
    failed = [s.key for s in all_steps if s.status != "passed" and not (args.only and s.status == "not run")]
    if failed:
        print(f"gpu_check: failed steps: {failed} (summary: {out / 'summary.md'})", file=sys.stderr)
    return 1 if failed else 0


# -- the steps run in-process ----------------------------------------------------------------------------------


def _version(module: str) -> str:
    try:
        mod = __import__(module, fromlist=["__version__"])
    except Exception as err:  # ImportError, or a CUDA library failing to load
        return f"not importable ({type(err).__name__}: {err})"
    return str(getattr(mod, "__version__", "installed, no __version__"))


def step_env(dry: bool) -> int:
    """nvidia-smi, then the versions that decide what ran: the answer to "which stack was this?"."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        print("nvidia-smi: not found" + (" (dry run)" if dry else ""))
    else:
        print(subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout)
    versions: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    for module in ("numpy", "zarr", "xarray", "dask", "distributed", "numcodecs", "obstore", "cupy",
                   "nvidia.nvcomp", "dask_cuda", "nvtx", "zarrs", "tensorstore", "xarray_zarrmax"):
        versions[module] = _version(module)
    try:
        import cupy

        runtime = cupy.cuda.runtime
        versions["cuda_runtime"] = runtime.runtimeGetVersion()
        versions["cuda_driver"] = runtime.driverGetVersion()
        props = runtime.getDeviceProperties(0)
        versions["gpu"] = f"{props['name'].decode()}, {props['totalGlobalMem'] / 2**30:.0f} GiB"
    except Exception as err:  # no cupy, or no device
        versions["cuda"] = f"not usable ({type(err).__name__}: {err})"
        if not dry:
            print(json.dumps(versions, indent=1))
            print("gpu_check: CUDA is not usable here; run with --dry-run on a machine without a GPU",
                  file=sys.stderr)
            return 1
    print(json.dumps(versions, indent=1))
    return 0


def step_cluster(dry: bool, scratch: Path, json_path: str | None) -> int:
    """A sharded store read on a dask cluster of GPU workers (a CPU cluster and the stand-in when ``dry``), every
    value compared with engine="zarr" on the CPU."""
    import numpy as np
    import xarray as xr
    import zarr
    from distributed import Client, LocalCluster
    from zarr.codecs import ZstdCodec

    scratch.mkdir(parents=True, exist_ok=True)
    path = scratch / "cluster.zarr"
    n_shards, shard = (4, 2**18) if dry else (16, 2**22)  # dry: 4 MiB; real: 256 MiB of float32
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(n_shards * shard,), chunks=(shard // 16,), shards=(shard,), dtype="f4",
                             compressors=[ZstdCodec(level=1)], dimension_names=["x"])
    rng = np.random.default_rng(0)
    arr[:] = rng.integers(0, 1024, n_shards * shard).astype("f4") / 8
    if dry:
        from xarray_zarrmax.gpu.device import HostDevice

        cluster: Any = LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None)
        device: Any = HostDevice()
    else:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(dashboard_address=None)
        device = "cuda"
    start = time.perf_counter()
    with cluster, Client(cluster) as client:
        workers = len(client.scheduler_info()["workers"])
        ds = xr.open_dataset(path, engine="zarrmax", chunks={}, device=device, consolidated=False)

        def to_numpy(block: Any) -> Any:
            return block.get() if type(block).__module__.startswith("cupy") else block

        kinds = ds["v"].data.map_blocks(lambda b: np.array([type(b).__module__.split(".")[0]]), chunks=(1,),
                                        dtype=object, meta=np.array((), object)).compute()
        ours = ds["v"].data.map_blocks(to_numpy, meta=np.array((), "f4")).compute()
    seconds = time.perf_counter() - start
    oracle = xr.open_dataset(path, engine="zarr", consolidated=False)["v"].values
    same = bool(np.array_equal(ours, oracle))
    expected_kind = "numpy" if dry else "cupy"
    result = {"workers": workers, "shards": n_shards, "mib": n_shards * shard * 4 / 2**20, "seconds": seconds,
              "block_types": sorted(set(kinds.tolist())), "values_equal_engine_zarr": same}
    print("| workers | shards | MiB | seconds | block types | values equal engine=\"zarr\" |")
    print("|---|---|---|---|---|---|")
    print(f"| {workers} | {n_shards} | {result['mib']:.0f} | {seconds:.2f} | {result['block_types']} | {same} |")
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1))
    if not same or result["block_types"] != [expected_kind]:
        print(f"gpu_check: the cluster read gave wrong values or {result['block_types']} blocks "
              f"(expected {expected_kind})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
