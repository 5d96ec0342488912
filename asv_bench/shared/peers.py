"""One full read of a Zarr v3 array by each stack the read table compares, from one description of where the
array is (a local directory, or a bucket and prefix on MinIO), and the physical limits of that read.

Every reader returns the array it read (or, for the dask variant, one element of each block) so that the
caller can check the values; none of them keeps more than it must. The peers come from the ``bench`` extra:
``zarrs`` (Rust codec pipeline for zarr-python) and ``tensorstore``; a missing one raises `Missing`.
`read_engine` is the read the asv suite times for both engines, and `peak_memory` its peak resident memory in
a fresh process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CORES = os.cpu_count() or 1


class Missing(RuntimeError):
    """A peer's package is not installed (``pip install -e '.[bench]'``)."""


@dataclass(frozen=True)
class Where:
    """The array "v" of a group: ``path`` on local disk, or ``bucket``/``prefix`` on MinIO at ``endpoint``."""

    path: str | None = None
    bucket: str | None = None
    prefix: str | None = None
    endpoint: str | None = None
    key_id: str | None = None
    secret: str | None = None

    @property
    def local(self) -> bool:
        return self.path is not None

    def obstore(self) -> Any:
        from obstore.store import S3Store

        return S3Store(self.bucket, prefix=self.prefix, endpoint=self.endpoint, access_key_id=self.key_id,
                       secret_access_key=self.secret, region="us-east-1", client_options={"allow_http": True})

    def zarr_store(self) -> Any:
        import zarr

        if self.local:
            return zarr.storage.LocalStore(self.path, read_only=True)
        return zarr.storage.ObjectStore(self.obstore(), read_only=True)

    def url(self) -> tuple[str, dict[str, Any]]:
        """What engine="zarrmax" opens: the path, or the s3:// URL and its storage options."""
        if self.local:
            return str(self.path), {}
        return f"s3://{self.bucket}/{self.prefix}", {"storage_options": {
            "endpoint": self.endpoint, "access_key_id": self.key_id, "secret_access_key": self.secret,
            "region": "us-east-1"}}


# -- the physical limits --------------------------------------------------------------------------------


def stored_keys(where: Where) -> list[str]:
    """Every stored data object of "v" (chunks or shards), relative to the group."""
    if where.local:
        root = Path(str(where.path))
        return [str(p.relative_to(root)) for p in (root / "v").rglob("*") if p.is_file() and p.name != "zarr.json"]
    import obstore

    return [o["path"] for batch in obstore.list(where.obstore(), "v/c") for o in batch]


def raw_read(where: Where, keys: list[str], concurrency: int = 128) -> int:
    """Read every stored object whole, no decode: concurrent file reads, or obstore GETs; returns the bytes."""
    if where.local:
        root = Path(str(where.path))

        def read(k: str) -> int:
            with open(root / k, "rb") as f:
                return len(f.read())

        with ThreadPoolExecutor(16) as ex:
            return sum(ex.map(read, keys))
    import asyncio

    import obstore

    store = where.obstore()

    async def run() -> int:
        sem = asyncio.Semaphore(concurrency)

        async def one(k: str) -> int:
            async with sem:
                got = await obstore.get_async(store, k)
                return len(await got.bytes_async())

        return sum(await asyncio.gather(*(one(k) for k in keys)))

    return asyncio.run(run())


@dataclass
class DecodeInput:
    """Every compressed chunk of "v" in memory, and where each decodes to in a preallocated output."""

    chunks: list[tuple[bytes, tuple[slice, ...]]]
    shape: tuple[int, ...]
    dtype: np.dtype
    chunk_shape: tuple[int, ...]


def _get(where: Where, key: str) -> bytes:
    if where.local:
        return (Path(str(where.path)) / key).read_bytes()
    import obstore

    return bytes(obstore.get(where.obstore(), key).bytes())


def decode_input(where: Where) -> DecodeInput:
    """Every compressed chunk of "v" (each inner chunk of a shard, sliced by the shard's index: zarr's default
    layout, the index of (offset, length) pairs at the end followed by its crc32c) with its output region."""
    import itertools
    import json

    meta = json.loads(_get(where, "v/zarr.json"))
    shape = tuple(meta["shape"])
    outer = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    codecs = meta["codecs"]
    sharded = codecs[0]["name"] == "sharding_indexed"
    inner = tuple(codecs[0]["configuration"]["chunk_shape"]) if sharded else outer
    per = tuple(o // i for o, i in zip(outer, inner, strict=True))
    chunks = []
    for obj in itertools.product(*(range(-(-n // c)) for n, c in zip(shape, outer, strict=True))):
        raw = _get(where, "v/c/" + "/".join(map(str, obj)))
        entries = (np.frombuffer(raw[-(16 * int(np.prod(per)) + 4):-4], dtype="<u8").reshape(*per, 2)
                   if sharded else None)
        for local in itertools.product(*(range(p) for p in per)):
            start = [o * oc + li * ic for o, oc, li, ic in zip(obj, outer, local, inner, strict=True)]
            if any(a >= n for a, n in zip(start, shape, strict=True)):
                continue
            region = tuple(slice(a, min(a + c, n)) for a, c, n in zip(start, inner, shape, strict=True))
            if entries is None:
                chunks.append((raw, region))
            else:
                offset, length = (int(x) for x in entries[local])
                chunks.append((raw[offset:offset + length], region))
    return DecodeInput(chunks, shape, np.dtype(meta["data_type"]), inner)


def decode_all(inp: DecodeInput, decode_into: Callable[[bytes, np.ndarray], None], threads: int = CORES) -> np.ndarray:
    """Decode every chunk into a preallocated output on ``threads`` threads: straight into the output where the
    chunk's region is one contiguous block, else (edge chunks, inner dimensions split) through a scratch chunk
    and a copy, as a reader must."""
    out = np.empty(inp.shape, dtype=inp.dtype)

    def one(item: tuple[bytes, tuple[slice, ...]]) -> None:
        raw, region = item
        target = out[region]
        if target.shape == inp.chunk_shape and target.flags.c_contiguous:
            decode_into(raw, target)
        else:
            scratch = np.empty(inp.chunk_shape, dtype=inp.dtype)
            decode_into(raw, scratch)
            target[...] = scratch[tuple(slice(0, s) for s in target.shape)]

    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, inp.chunks))
    return out


# -- the stacks -------------------------------------------------------------------------------------------


def read_engine(target: Any, engine: str, workers: int, *, use_dask: bool = True, **kw: Any) -> int:
    """Open ``target`` with ``engine`` and load the variable "v" fully (``chunks={}`` and dask's threaded
    scheduler with ``workers`` threads, or ``chunks=None``); returns the bytes loaded."""
    import dask
    import xarray as xr

    extra: dict[str, Any] = {"consolidated": False} if engine == "zarr" else {}
    ds = xr.open_dataset(target, engine=engine, chunks={} if use_dask else None, **extra, **kw)
    with dask.config.set(scheduler="threads", num_workers=workers):
        return ds["v"].values.nbytes


def peak_read(target: Any, engine: str, use_dask: bool, kw: dict[str, Any]) -> int:
    """In a fresh process (`peak_memory`): peak resident memory of one `read_engine` with 16 threads, minus the
    resident memory before it (interpreter and imports)."""
    import dask  # noqa: F401  (imported before the baseline: what is measured is the read)
    import obstore  # noqa: F401
    import xarray  # noqa: F401
    import zarr  # noqa: F401

    import xarray_zarrmax.backend  # noqa: F401
    from asv_bench.shared.process import vm_status

    before = vm_status("VmRSS")
    read_engine(target, engine, 16, use_dask=use_dask, **kw)
    return vm_status("VmHWM") - before


def peak_memory(target: Any, engine: str, use_dask: bool, kw: dict[str, Any]) -> int:
    """Peak resident memory (bytes) of a fresh process that opens and reads the array once, minus its
    resident memory before the read (interpreter and imports)."""
    from asv_bench.shared.process import in_fresh_process

    return int(in_fresh_process("asv_bench.shared.peers:peak_read", target, engine, use_dask, kw))


def read_xarray(where: Where, engine: str, *, use_dask: bool, chunks: Any = None) -> np.ndarray:
    """``xr.open_dataset`` then the whole of "v": ``.values`` without dask; with dask, every block is read and
    reduced to its first element (``map_blocks``), so the number is the read path, not a concatenate. With
    dask and no ``chunks``: ``chunks={}``; with ``chunks`` (e.g. "auto"): those chunks. Default config."""
    import dask
    import xarray as xr

    if engine == "zarr":
        target, kw = where.zarr_store(), {"consolidated": False}
    else:
        target, kw = where.url()
    ds = xr.open_dataset(target, engine=engine, chunks=(chunks or {}) if use_dask else None, **kw)
    if not use_dask:
        return np.asarray(ds["v"].values)
    data = ds["v"].data
    first = data.map_blocks(_first_element, chunks=tuple((1,) * n for n in data.numblocks), dtype=data.dtype)
    with dask.config.set(scheduler="threads", num_workers=16):
        return np.asarray(first.compute())


def _first_element(block: np.ndarray) -> np.ndarray:
    return block[(slice(0, 1),) * block.ndim].copy()


def block_starts(shape: tuple[int, ...], chunks: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, ...]:
    """The index of each dask block's first element, per dimension (what ``read_xarray`` with dask returns)."""
    del shape
    return tuple(np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) for c in chunks)


def read_zarr_python(where: Where, pipeline: str | None = None) -> np.ndarray:
    """zarr-python's own full read (``arr[...]``), tuned as seed 000 did: 128 requests in flight, a thread
    per core; ``pipeline`` picks the codec pipeline (zarrs, or zarr's FusedCodecPipeline)."""
    import zarr

    settings: dict[str, Any] = {"async.concurrency": 128, "threading.max_workers": CORES}
    if pipeline == "zarrs":
        try:
            import zarrs  # noqa: F401
        except ImportError as err:
            raise Missing("zarrs is not installed: pip install -e '.[bench]'") from err
        settings |= {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.direct_io": False}
    elif pipeline == "fused":
        settings["codec_pipeline.path"] = "zarr.core.codec_pipeline.FusedCodecPipeline"
    with zarr.config.set(settings):
        arr = zarr.open_array(where.zarr_store(), path="v", mode="r")
        return np.asarray(arr[...])


def read_tensorstore(where: Where) -> np.ndarray:
    """TensorStore's zarr3 driver over its file or s3 kvstore, one ``read()`` of the whole array."""
    try:
        import tensorstore as ts
    except ImportError as err:
        raise Missing("tensorstore is not installed: pip install -e '.[bench]'") from err
    if where.local:
        kvstore: dict[str, Any] = {"driver": "file", "path": f"{where.path}/v/"}
    else:
        os.environ["AWS_ACCESS_KEY_ID"] = str(where.key_id)
        os.environ["AWS_SECRET_ACCESS_KEY"] = str(where.secret)
        kvstore = {"driver": "s3", "bucket": where.bucket, "path": f"{where.prefix}/v/",
                   "endpoint": where.endpoint, "aws_region": "us-east-1",
                   "aws_credentials": {"type": "environment"}}
    spec = {"driver": "zarr3", "kvstore": kvstore, "context": {"cache_pool": {"total_bytes_limit": 0},
                                                               "data_copy_concurrency": {"limit": CORES}}}
    arr = ts.open(spec, read=True).result()
    return np.asarray(arr.read().result())
