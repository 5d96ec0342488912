"""Full reads of seed 000's layouts (`asv_bench.shared.read_layouts`), from a local directory and from MinIO.

Each array is ``ZARRMAX_ASV_MIB`` MiB (default 64), written once per run in ``setup_cache``. A read is
``xr.open_dataset(..., chunks={})`` then ``ds["v"].values`` on dask's threaded scheduler with 16 threads, for
both engines. The raw ceiling is every stored object of the array read with no decode: concurrent file reads
(local) or obstore GETs at zarrmax's concurrency (MinIO).

asv takes every number as lower-is-better; ``track_read_throughput`` and ``track_ratio_to_ceiling`` are
higher-is-better, so ``asv continuous``/``asv compare`` show their improvements as regressions
(``time_read`` measures the same reads the asv way).
"""

from __future__ import annotations

import os
from typing import Any

from asv_bench.shared import peers

from . import requires_distributed, skip
from .helpers import ENGINES, LAYOUTS, SHARDED, ReadTarget, _Read, median_time, write_read_data


class ReadThroughput(_Read):
    """Full read of one array per layout and store."""

    params = [ENGINES, LAYOUTS, ["local", "minio"]]
    param_names = ["engine", "layout", "store"]

    def setup(self, cache: dict[str, Any], engine: str, layout: str, store: str) -> None:
        self.target = ReadTarget(cache, engine, layout, store)

    def time_read(self, cache: dict[str, Any], engine: str, layout: str, store: str) -> None:
        self.target.read()

    def peakmem_read(self, cache: dict[str, Any], engine: str, layout: str, store: str) -> None:
        self.target.read()

    def track_read_throughput(self, cache: dict[str, Any], engine: str, layout: str, store: str) -> float:
        """GB/s of decoded output, median of 3 reads after a warm-up read."""
        return self.target.nbytes / median_time(self.target.read) / 1e9

    track_read_throughput.unit = "GB/s"  # type: ignore[attr-defined]

    def track_ratio_to_ceiling(self, cache: dict[str, Any], engine: str, layout: str, store: str) -> float:
        """Raw-ceiling time / engine time for the same stored objects (1.0: as fast as reading the bytes);
        medians after a warm-up each, the ceiling (often a few ms from the page cache) over more calls."""
        t_ceiling = median_time(self.target.ceiling, repeat=7)
        t_engine = median_time(self.target.read, repeat=3)
        return t_ceiling / t_engine

    track_ratio_to_ceiling.unit = "ratio"  # type: ignore[attr-defined]


class ReadDistributed(_Read):
    """Full read with a ``distributed`` LocalCluster (2 worker processes, 2 threads each) as the scheduler:
    the tasks, their store handles and the decoded chunks cross process boundaries."""

    params = [ENGINES, [SHARDED], ["local", "minio"]]
    param_names = ["engine", "layout", "store"]
    _client: list[Any] = []

    def setup(self, cache: dict[str, Any], engine: str, layout: str, store: str) -> None:
        requires_distributed()
        self.target = ReadTarget(cache, engine, layout, store)
        if not self._client:  # one cluster per process (asv reruns setup before every sample)
            import atexit

            from distributed import Client, LocalCluster

            cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=50,
                                   local_directory=os.getcwd())  # asv's cache directory, removed after the run
            client = Client(cluster, set_as_default=False)
            self._client.append(client)

            @atexit.register
            def _close() -> None:
                client.close()
                cluster.close()

    def time_read_distributed(self, cache: dict[str, Any], engine: str, layout: str, store: str) -> None:
        client = self._client[0]
        ds = self.target.open()
        arr = ds["v"].data
        out = client.compute(arr).result()
        assert out.nbytes == self.target.nbytes


class ReadPeers(_Read):
    """The same full read by every peer (zarr-python tuned, with the zarrs pipeline, with its FusedCodecPipeline;
    TensorStore), by zarrmax with dask reduced block by block, and the decode ceiling: the readers of the read
    table (`asv_bench.shared.peers`). A peer that is not installed is skipped (``.[bench]``)."""

    params = [["zarr_tuned", "zarrs", "zarr_fused", "tensorstore", "zarrmax_dask_blocks", "decode_ceiling"],
              LAYOUTS, ["local", "minio"]]
    param_names = ["stack", "layout", "store"]

    def setup(self, cache: dict[str, Any], stack: str, layout: str, store: str) -> None:
        where = ReadTarget(cache, "zarrmax", layout, store).where
        if stack == "decode_ceiling":
            import numcodecs

            inp, zstd = peers.decode_input(where), numcodecs.Zstd()
            self.run = lambda: peers.decode_all(inp, lambda raw, out: zstd.decode(raw, out=out))
            return
        readers = {"zarr_tuned": lambda: peers.read_zarr_python(where),
                   "zarrs": lambda: peers.read_zarr_python(where, "zarrs"),
                   "zarr_fused": lambda: peers.read_zarr_python(where, "fused"),
                   "tensorstore": lambda: peers.read_tensorstore(where),
                   "zarrmax_dask_blocks": lambda: peers.read_xarray(where, "zarrmax", use_dask=True)}
        self.run = readers[stack]
        try:
            self.run()
        except peers.Missing as why:
            skip(str(why), service=False)

    def time_read(self, cache: dict[str, Any], stack: str, layout: str, store: str) -> None:
        self.run()


class ReadPeakMemory:
    """Peak resident memory of a fresh process that reads the whole array once (local directory), minus its
    resident memory before the read (interpreter, imports): what the read itself costs, where ``peakmem_read``
    is the whole benchmark process. Uses the read table's `peers.peak_memory` (VmHWM, Linux)."""

    params = [ENGINES, LAYOUTS]
    param_names = ["engine", "layout"]
    timeout = 180
    unit = "bytes"
    setup_cache = write_read_data

    def setup(self, cache: dict[str, Any], engine: str, layout: str) -> None:
        if not os.path.exists("/proc/self/status"):
            skip("needs /proc (Linux)", service=False)
        self.target = ReadTarget(cache, engine, layout, "local")

    def track_read_peak_memory(self, cache: dict[str, Any], engine: str, layout: str) -> int:
        return int(peers.peak_memory(self.target.target(), engine, True, {}))
