"""The layout advisor: its counts against counted reads, its search under constraints, its errors, its CLI."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from zarr.codecs import ZstdCodec

import xarray_zarrmax
from xarray_zarrmax.advise import (
    KNOWN_PATTERNS,
    Batch,
    Constraints,
    advise,
    neighbours,
    pattern_selections,
    rank,
)
from xarray_zarrmax.advise.counting import capped_runs, coalesced_runs, count_read
from xarray_zarrmax.advise.model import (
    Costs,
    Layout,
    ReadCounts,
    Reader,
    decode_rate,
    predict,
)
from xarray_zarrmax.advise.morton import morton_order
from xarray_zarrmax.advise.probe import probe_decoder, probe_reader, probe_store
from xarray_zarrmax.cli import main
from xarray_zarrmax.codecs import sharding as shard
from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.geometry import Axis, coalesce
from xarray_zarrmax.read import fetch, local_reads
from xarray_zarrmax.storage import local

# The advisor costs reads as a cold decoded-chunk cache does: the reads it is compared with run without one.
pytestmark = pytest.mark.usefixtures("no_chunk_cache")

SHAPE = (37, 20, 30)
DIMS = ("time", "lat", "lon")
#: (chunks, shards): sharded with edge shards and Morton order, one shard per time series, unsharded maps,
#: small chunks in many shards
LAYOUTS = [((4, 5, 6), (16, 10, 12)), ((37, 2, 2), (37, 10, 10)), ((1, 20, 30), None), ((2, 4, 4), (8, 8, 8))]
SELECT_BOX = (1.0, {"time": slice(3, 30), "lat": slice(2, 19), "lon": 7})


def dataset() -> xr.Dataset:
    rng = np.random.default_rng(0)
    # values never equal the fill value, so zarr stores every chunk inside the array
    values = rng.random(SHAPE).astype("f4") + 1
    return xr.Dataset({"t2m": (DIMS, values)},
                      coords={"lat": np.linspace(-90, 90, SHAPE[1]), "lon": np.linspace(-180, 174, SHAPE[2])})


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """Each layout written uncompressed (so every chunk's stored size is known exactly) to a local store."""
    root = tmp_path_factory.mktemp("advise")
    paths = {}
    for i, (chunks, shards) in enumerate(LAYOUTS):
        encoding: dict[str, Any] = {"chunks": chunks, "compressors": None}
        if shards is not None:
            encoding["shards"] = shards
        path = str(root / f"l{i}.zarr")
        dataset().to_zarr(path, encoding={"t2m": encoding}, zarr_format=3, mode="w", consolidated=True)
        paths[i] = path
    return paths


def local_reader() -> Reader:
    c = get_config()
    return Reader(concurrency=c.concurrency, full_shard_fraction=c.full_shard_fraction, coalesce_gap=c.coalesce_gap,
                  split_size=c.split_size, inflight_bytes=c.inflight_bytes, threads=c.threads, local=True)


def selections(name: str) -> list[Any]:
    spec = SELECT_BOX if name == "box" else 1.0
    coords = {"lat": dataset()["lat"].values, "lon": dataset()["lon"].values}
    return pattern_selections(name, spec, DIMS, SHAPE, coords, "t2m")  # type: ignore[arg-type]


def read_counted(path: str, sels: list[Any], chunks: Any) -> tuple[int, int]:
    """GETs and bytes of reading each selection in turn through one open dataset (so indexes are cached as
    our reader caches them: per open). Opening is counted apart."""
    ds = xr.open_dataset(path, engine="zarrmax", chunks=chunks, consolidated=True)
    with xarray_zarrmax.request_counts() as counts:
        for axes in sels:
            ds["t2m"][tuple(slice(a.start, a.stop) for a in axes)].values  # noqa: B018  # the read is the point
    return counts.total("get"), counts.total("bytes")


@pytest.mark.parametrize("layout", range(len(LAYOUTS)), ids=[str(Layout(c, s)) for c, s in LAYOUTS])
@pytest.mark.parametrize("pattern", [*KNOWN_PATTERNS, "box"])
@pytest.mark.parametrize("gap", [2**20, 0], ids=["gap=1MiB", "gap=0"])  # 0: every run of the Morton order shows
def test_counts_equal_counted_reads(written: dict[int, str], layout: int, pattern: str, gap: int,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # freshly written files are "racy" for 2 s: their indexes would not be cached, and the multi-window
    # pattern would fetch them again; the model assumes a settled store (as S3's ETags always are)
    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)
    chunks, shards = LAYOUTS[layout]
    sels = selections(pattern)
    with xarray_zarrmax.set_config(coalesce_gap=gap):
        predicted = count_read(sels, SHAPE, 4, Layout(chunks, shards), 4 * math.prod(chunks), local_reader())
        assert (predicted.requests, predicted.bytes) == read_counted(written[layout], sels, None)


@pytest.mark.parametrize("constant", [False, True], ids=["file above a piece", "file of one piece"])
def test_counts_equal_counted_reads_of_local_shards_read_in_pieces(tmp_path: Path, constant: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A local read of a shard's chunks that decode to `local_reads.STREAM_BYTES` or more goes in pieces
    (`local_reads.read_local_shard`): the index, then pieces of at most `local_reads.PIECE_BYTES`, whatever fraction of
    the shard is read; a file of at most one piece is read whole when the read needs ``full_shard_fraction`` of
    its chunks. The model counts those reads too; with ``coalesce_gap=0`` and ``full_shard_fraction=1`` the
    reader fetches the touched chunks and the index, not one byte more."""
    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)
    shape, chunks, shards = (48, 128, 256), (8, 32, 32), (48, 128, 256)  # one 6 MiB shard of 32 KiB chunks
    values = (np.full(shape, 1.5) if constant else np.random.default_rng(2).random(shape) + 1).astype("f4")
    path = str(tmp_path / "pieces.zarr")
    compressors = [ZstdCodec(level=1)] if constant else None  # constant: a file of a few kB
    xr.Dataset({"v": (DIMS, values)}).to_zarr(
        path, encoding={"v": {"chunks": chunks, "shards": shards, "compressors": compressors}}, zarr_format=3,
        mode="w", consolidated=True)
    n_chunks = math.prod(s // c for s, c in zip(shards, chunks, strict=True))
    stored = sum(p.stat().st_size for p in Path(path, "v", "c").rglob("*") if p.is_file())
    chunk_enc = (stored - 16 * n_chunks - 4) // n_chunks
    assert (stored <= local_reads.PIECE_BYTES) == constant
    boxes = {"all": (Axis(0, 48), Axis(0, 128), Axis(0, 256)), "most times": (Axis(0, 40), Axis(0, 128), Axis(0, 256)),
             "most rows": (Axis(0, 48), Axis(0, 96), Axis(3, 250)), "map": (Axis(5, 6), Axis(0, 128), Axis(0, 256))}
    shard_file = next(p for p in Path(path, "v", "c").rglob("*") if p.is_file())
    index_nbytes = 16 * n_chunks + 4
    entries = np.frombuffer(shard_file.read_bytes()[-index_nbytes:-4], dtype="<u8").reshape(
        *(s // c for s, c in zip(shards, chunks, strict=True)), 2)
    for gap, fraction in ((2**20, 0.5), (0, 0.5), (0, 1.0)):
        for name, axes in boxes.items():
            with xarray_zarrmax.set_config(coalesce_gap=gap, full_shard_fraction=fraction):
                reader = local_reader()
                predicted = count_read([axes], shape, 4, Layout(chunks, shards), chunk_enc, reader, compressed=constant)
                ds = xr.open_dataset(path, engine="zarrmax", chunks=None, consolidated=True)
                with xarray_zarrmax.request_counts() as counts:
                    got = ds["v"][tuple(slice(a.start, a.stop) for a in axes)].values
            assert np.array_equal(got, values[tuple(slice(a.start, a.stop) for a in axes)])
            assert (predicted.requests, predicted.bytes) == (counts.total("get"), counts.total("bytes")), (name, gap)
            if fraction == 1.0:
                box = tuple(slice(a.start // c, -(-a.stop // c)) for a, c in zip(axes, chunks, strict=True))
                touched = entries[box]
                assert counts.total("bytes") == int(touched[..., 1].sum()) + index_nbytes, name
            streamed = math.prod(a.size for a in axes) * 4 >= local_reads.STREAM_BYTES
            if streamed and not constant:  # the index, then pieces of at most PIECE_BYTES (not the whole shard)
                pieces = predicted.bytes // local_reads.PIECE_BYTES
                assert predicted.index_requests == 1 and predicted.requests - 1 >= pieces


def test_capped_runs_equal_the_readers_pieces() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        sizes = rng.integers(1, 50, size=200)
        ranks = rng.choice(200, size=int(rng.integers(1, 120)), replace=False)
        gap, cap = int(rng.integers(0, 200)), int(rng.integers(1, 600))
        ends = np.cumsum(sizes)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(local_reads, "PIECE_BYTES", cap)
            reads = local_reads.local_pieces([(None, int(ends[r] - sizes[r]), int(ends[r])) for r in ranks], gap)
        assert capped_runs(ranks, sizes, gap, cap) == (len(reads), sum(b - a for a, b, _ in reads))


@pytest.mark.parametrize("layout", range(len(LAYOUTS)), ids=[str(Layout(c, s)) for c, s in LAYOUTS])
@pytest.mark.parametrize("pattern", [*KNOWN_PATTERNS, "box"])
def test_indexes_parsed_equal_the_readers(written: dict[int, str], layout: int, pattern: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The model charges the reader's work on a shard index once per index the reader parses: for shards read
    through their index and for shards read whole alike (each whole shard's index is parsed out of its
    bytes), none for unsharded objects or indexes cached by the open."""
    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)
    parsed = 0
    real = shard.parse_index

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal parsed
        parsed += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(shard, "parse_index", counting)  # split_index's (a whole shard's bytes)
    monkeypatch.setattr(fetch, "parse_index", counting)  # an index read on its own (remotely)
    monkeypatch.setattr(local_reads, "parse_index", counting)  # (locally)
    chunks, shards = LAYOUTS[layout]
    sels = selections(pattern)
    predicted = count_read(sels, SHAPE, 4, Layout(chunks, shards), 4 * math.prod(chunks), local_reader())
    read_counted(written[layout], sels, None)
    assert predicted.indexes == parsed
    if shards is not None and predicted.objects:
        assert parsed > 0


@pytest.mark.parametrize("layout", range(len(LAYOUTS)), ids=[str(Layout(c, s)) for c, s in LAYOUTS])
@pytest.mark.parametrize("pattern", ["timeseries", "map", "region-mean", "full-scan"])
def test_counts_equal_counted_dask_reads(written: dict[int, str], layout: int, pattern: str) -> None:
    """With dask (one task per group of whole objects), each object is still fetched once, the same way."""
    chunks, shards = LAYOUTS[layout]
    sels = selections(pattern)
    predicted = count_read(sels, SHAPE, 4, Layout(chunks, shards), 4 * math.prod(chunks), local_reader())
    assert (predicted.requests, predicted.bytes) == read_counted(written[layout], sels, {})


def test_counts_equal_counted_reads_on_random_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random shapes (1 to 3 dimensions), chunks, shards, boxes and coalescing gaps: the model still counts
    every GET and byte of the real read."""
    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)
    rng = np.random.default_rng(7)
    for case in range(25):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(rng.integers(1, 40)) for _ in range(ndim))
        chunks = tuple(int(rng.integers(1, n + 1)) for n in shape)
        shards = None if rng.random() < 0.25 else tuple(c * int(rng.integers(1, 6)) for c in chunks)
        dims = tuple(f"d{i}" for i in range(ndim))
        encoding: dict[str, Any] = {"chunks": chunks, "compressors": None} | ({"shards": shards} if shards else {})
        path = str(tmp_path / f"c{case}.zarr")
        values = rng.random(shape).astype("f8") + 1
        xr.Dataset({"v": (dims, values)}).to_zarr(path, encoding={"v": encoding}, zarr_format=3, consolidated=True)
        boxes = []
        for _ in range(int(rng.integers(1, 4))):
            starts = [int(rng.integers(0, n)) for n in shape]
            boxes.append(tuple(Axis(a, int(rng.integers(a + 1, n + 1))) for a, n in zip(starts, shape, strict=True)))
        gap = int(rng.choice([0, 8, 2**20]))
        with xarray_zarrmax.set_config(coalesce_gap=gap):
            predicted = count_read(boxes, shape, 8, Layout(chunks, shards), 8 * math.prod(chunks), local_reader())
            ds = xr.open_dataset(path, engine="zarrmax", chunks=None, consolidated=True)
            with xarray_zarrmax.request_counts() as counts:
                for axes in boxes:
                    ds["v"][tuple(slice(a.start, a.stop) for a in axes)].values  # noqa: B018
        assert (predicted.requests, predicted.bytes) == (counts.total("get"), counts.total("bytes")), (
            case, shape, chunks, shards, [(a.start, a.stop) for a in axes], gap)


@pytest.mark.s3
def test_counts_equal_counted_reads_on_minio(minio: Any, bucket: str) -> None:
    """On S3 an object above split_size comes in parts: the model counts them too."""
    options = minio.storage_options()
    url = f"s3://{bucket}/advise-counts.zarr"
    chunks, shards = (4, 5, 6), (16, 10, 12)
    xarray_zarrmax.to_zarr(dataset(), url, encoding={"t2m": {"chunks": chunks, "shards": shards, "compressors": None}},
                           mode="w", consolidated=True, storage_options=options)
    with xarray_zarrmax.set_config(split_size=2048):  # shards of about 7.7 kB: whole-shard GETs in 4 parts
        reader = Reader(concurrency=get_config().concurrency, split_size=2048, local=False)
        for pattern in ("timeseries", "map", "full-scan"):
            sels = selections(pattern)
            predicted = count_read(sels, SHAPE, 4, Layout(chunks, shards), 4 * math.prod(chunks), reader)
            ds = xr.open_dataset(url, engine="zarrmax", chunks=None, storage_options=options)
            with xarray_zarrmax.request_counts() as counts:
                ds["t2m"][tuple(slice(a.start, a.stop) for a in sels[0])].values  # noqa: B018
            assert (predicted.requests, predicted.bytes) == (counts.total("get"), counts.total("bytes")), pattern


@pytest.mark.s3
def test_probe_store_on_minio_cleans_up(minio: Any, bucket: str) -> None:
    import obstore

    probe = probe_store(f"s3://{bucket}/scratch", minio.storage_options(), large=2**20)
    assert not probe.local and probe.latency_s > 0 and probe.aggregate_bps >= probe.request_bps > 0
    assert 0 <= probe.connect_s < 0.1 and 0 <= probe.request_s < 0.1
    assert list(obstore.list(minio.obstore(bucket, "scratch")).collect()) == []


def test_coalesced_runs_equal_coalesce() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        sizes = rng.integers(1, 50, size=200) if rng.random() < 0.5 else np.full(200, int(rng.integers(1, 50)))
        ranks = rng.choice(200, size=int(rng.integers(1, 40)), replace=False)
        gap = int(rng.integers(0, 200))
        ends = np.cumsum(sizes)
        merged = coalesce([(int(ends[r] - sizes[r]), int(ends[r])) for r in ranks], gap)
        assert coalesced_runs(ranks, sizes, gap) == (len(merged), sum(b - a for a, b, _ in merged))


def test_compressed_edge_chunks_count_at_their_inside_fraction(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A compressed chunk mostly outside the array is mostly fill value and stores small, so the ranges on
    either side of it merge: the model must see that, or it counts requests the reader never sends."""
    from zarr.codecs import ZstdCodec

    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)
    shape, chunks, shards = (16, 3001), (1, 3000), (8, 6000)  # each shard: 8 full chunks, 8 holding one value
    values = np.random.default_rng(2).random(shape).astype("f4")  # little to compress: full chunks ~10.8 of 12 kB
    ds = xr.Dataset({"v": (("time", "x"), values)})
    path = str(tmp_path / "edge.zarr")
    ds.to_zarr(path, encoding={"v": {"chunks": chunks, "shards": shards, "compressors": [ZstdCodec()]}},
               zarr_format=3, mode="w", consolidated=True)
    raw = (tmp_path / "edge.zarr" / "v" / "c" / "0" / "0").read_bytes()
    lengths = np.frombuffer(raw[-(16 * 16 + 4):-4], dtype="<u8").reshape(8, 2, 2)[..., 1]
    assert lengths[:, 1].max() < 200 < 10_000 < lengths[:, 0].min()  # the premise: edge chunks store small
    chunk_enc = int(np.median(lengths[:, 0]))
    sel = [(Axis(0, 16), Axis(0, 1))]  # the time series at x = 0: chunk (t, 0) of every t
    with xarray_zarrmax.set_config(coalesce_gap=1000, full_shard_fraction=1.0):
        reader = local_reader()
        predicted = count_read(sel, shape, 4, Layout(chunks, shards), chunk_enc, reader, compressed=True)
        ds = xr.open_dataset(path, engine="zarrmax", chunks=None, consolidated=True)
        with xarray_zarrmax.request_counts() as counts:
            ds["v"][:, 0].values  # noqa: B018
    assert predicted.requests == counts.total("get")
    assert predicted.bytes == pytest.approx(counts.total("bytes"), rel=0.02)
    uncompressed = count_read(sel, shape, 4, Layout(chunks, shards), chunk_enc, reader)
    assert uncompressed.requests > predicted.requests  # at full size the edge chunks would split the ranges


GEOS = (5136, 721, 1152)  # seed 001's GEOS-FP cube (time, lat, lon)


def _pairwise(*levels: list) -> list[tuple]:
    """Of the combinations of three lists of three values, 9 that hold every pair of values of any two (an
    orthogonal array L9): each constraint meets each value of every other, in a third of the searches."""
    assert len(levels) == 3 and all(len(v) == 3 for v in levels)
    return [(levels[0][i], levels[1][j], levels[2][(i + j) % 3]) for i in range(3) for j in range(3)]


# Not all 27: each is a search of GEOS-FP's grid, 270 s of a CI run in all. Constraints that only conflict
# together: `test_constraints_that_only_conflict_together`
@pytest.mark.parametrize(("max_object_mb", "max_objects", "budget_mb"),
                         _pairwise([None, 4, 64], [None, 10_000, 1_000_000], [None, 32, 512]))
def test_search_honours_every_constraint(max_object_mb: int | None, max_objects: int | None,
                                         budget_mb: int | None) -> None:
    costs = Costs(ratio=0.5)
    constraints = Constraints(None if max_object_mb is None else max_object_mb * 2**20, max_objects,
                              None if budget_mb is None else budget_mb * 2**20)
    ranked = rank(GEOS, DIMS, 4, {"timeseries": 0.5, "map": 0.5}, costs=costs, reader=Reader(),
                  constraints=constraints)
    assert ranked
    for c in ranked:
        assert max_object_mb is None or c.object_bytes <= max_object_mb * 2**20
        assert max_objects is None or c.objects <= max_objects
        assert budget_mb is None or c.task_memory <= budget_mb * 2**20
        assert c.objects == math.prod(-(-n // o) for n, o in zip(GEOS, c.layout.outer, strict=True))
    assert [c.score for c in ranked] == sorted(c.score for c in ranked)


def test_best_layout_follows_the_pattern() -> None:
    def best(mix: dict[str, float]) -> Layout:
        return rank(GEOS, DIMS, 4, mix, costs=Costs(ratio=0.5), reader=Reader())[0].layout

    series, maps = best({"timeseries": 1.0}), best({"map": 1.0})
    # all time in one round of requests (128 in flight: with no work per request, 48 objects of 107 steps
    # cost what one does), a few cells
    assert series.outer[0] * Reader().concurrency >= GEOS[0] and math.prod(series.chunks[1:]) <= 16
    assert maps.outer[0] == 1  # objects of one time step: a map reads nothing else (in parallel GETs)


@pytest.mark.parametrize("mix", [{"timeseries": 1.0}, {"map": 1.0}, {"timeseries": 0.5, "map": 0.5}])
def test_search_stops_where_no_neighbour_is_better(mix: dict[str, float]) -> None:
    costs = Costs(ratio=0.5)
    top = rank(GEOS, DIMS, 4, mix, costs=costs, reader=Reader())[0]
    near = rank(GEOS, DIMS, 4, mix, costs=costs, reader=Reader(), layouts=neighbours(top.layout, GEOS, 4))
    assert min(c.score for c in near) >= top.score
    # that the search's best is the grid's (its pruning drops nothing better) is checked against costing the
    # whole grid on small arrays: test_advise_geometry.py (GEOS-FP's grid has 11,255 chunk shapes)


def test_search_finds_layouts_off_the_grid() -> None:
    # The old thinned grid's best for this mix (32x4x128 in 32x8x1152) had a better neighbour, and that one
    # another; the grid of issue 42 and its refining beat it by more
    mix = {"timeseries": 0.5, "map": 0.5}
    top = rank(GEOS, DIMS, 4, mix, costs=Costs(ratio=0.5), reader=Reader())[0]
    old = rank(GEOS, DIMS, 4, mix, costs=Costs(ratio=0.5), reader=Reader(),
               layouts=[Layout((32, 4, 128), (32, 8, 1152))])[0]
    assert top.score < 0.9 * old.score


@pytest.mark.parametrize("layout", [Layout((32, 4, 128), (32, 8, 1152)), Layout((1, 721, 32)),
                                    Layout((5136, 1, 4)), Layout((21, 8, 128), (42, 8, 1152))])
def test_neighbours_are_one_step_away_and_valid(layout: Layout) -> None:
    near = neighbours(layout, GEOS, 4)
    assert near and layout not in near and len(set(near)) == len(near)
    ks = [o // c for o, c in zip(layout.outer, layout.chunks, strict=True)]
    for n in near:
        assert all(o % c == 0 for o, c in zip(n.outer, n.chunks, strict=True))
        assert n.shards is None or math.prod(o // c for o, c in zip(n.outer, n.chunks, strict=True)) > 1
        assert all(c <= g for c, g in zip(n.chunks, GEOS, strict=True))
        assert 4 <= 4 * math.prod(n.chunks) <= 64 * 2**20  # one element to 64 MiB (no 64 KiB floor: issue 42)
        n_ks = [o // c for o, c in zip(n.outer, n.chunks, strict=True)]
        changed = [d for d in range(3) if n.chunks[d] != layout.chunks[d] or n_ks[d] != ks[d]]
        assert len(changed) == 1  # one dimension's chunk or chunks per shard


@pytest.mark.parametrize("shape", [(), (1,), (5,), (3, 7), (8, 8), (2, 3, 5), (1, 16, 3), (16, 1, 1), (7, 361, 1),
                                   (4, 4, 4), (33, 33, 3), (3, 2, 5, 4)])
def test_morton_order_is_zarrs_write_order(shape: tuple[int, ...]) -> None:
    from zarr.core.indexing import morton_order_coords

    coords = morton_order_coords(shape)
    want = np.asarray(coords, dtype=np.int64).reshape(len(coords), len(shape))
    np.testing.assert_array_equal(morton_order(shape), want)


@pytest.mark.parametrize(("grid", "extents", "chunks"), [
    ((4, 4), (16, 16), (4, 4)),  # every chunk whole
    ((3, 7), (10, 25), (4, 4)),  # the last chunk of each dimension partly outside
    ((5, 2, 3), (17, 8, 7), (4, 5, 3)),  # partly outside along every dimension; chunks past the extent unstored
    ((2, 3, 5, 4), (4, 5, 9, 13), (2, 2, 2, 4)),
    ((7, 1, 33), (25, 1, 70), (4, 1, 2)),
])
@pytest.mark.parametrize("compressed", [True, False])
def test_a_shards_stored_layout_follows_zarrs_write_order(grid: tuple[int, ...], extents: tuple[int, ...],
                                                         chunks: tuple[int, ...], compressed: bool) -> None:
    """Each stored chunk's rank is its place in zarr's Morton order among the chunks inside the array, and the
    sizes follow that order (an edge chunk compressed: its fraction inside the array of the whole size)."""
    from zarr.core.indexing import morton_order_coords

    from xarray_zarrmax.advise.counting import _stored_layout

    enc = 1000
    rank, sizes = _stored_layout(grid, extents, chunks, enc, compressed)
    want_rank = np.full(grid, -1, dtype=np.int64)
    want_sizes = []
    for coord in morton_order_coords(grid):
        inside = [min(c, max(0, e - int(i) * c)) / c for i, e, c in zip(coord, extents, chunks, strict=True)]
        if math.prod(inside) > 0:
            want_rank[tuple(int(i) for i in coord)] = len(want_sizes)
            want_sizes.append(max(1, round(math.prod(inside) * enc)) if compressed else enc)
    np.testing.assert_array_equal(rank, want_rank)
    np.testing.assert_array_equal(sizes, want_sizes)


def test_decode_rate_follows_the_probed_curve() -> None:
    curve = ((4096, 400e6), (65536, 1200e6), (4 << 20, 1500e6))
    assert decode_rate(curve, 4096, 1.0) == pytest.approx(400e6)
    assert decode_rate(curve, 16384, 1.0) == pytest.approx(800e6)  # halfway, in the logarithm of the size
    assert decode_rate(curve, 512, 1.0) == pytest.approx(400e6)  # beyond either end: that end's rate
    assert decode_rate(curve, 64 << 20, 1.0) == pytest.approx(1500e6)
    assert decode_rate((), 16384, 7.0) == 7.0
    # the mean chunk's size picks the rate: 100 chunks of 4 KiB decode slower per byte than one of 400 KiB
    small = ReadCounts(requests=1, chunks=100, decoded_bytes=409600)
    large = ReadCounts(requests=1, chunks=1, decoded_bytes=409600)
    flat, curved = Costs(decode_bps=1500e6), Costs(decode_bps=1500e6, decode_curve=curve)
    assert predict(small, curved, Reader()) - predict(small, flat, Reader()) == pytest.approx(
        409600 / 400e6 - 409600 / 1500e6)
    assert predict(large, curved, Reader()) < predict(small, curved, Reader())


def test_decode_curve_is_sorted_checked_and_hashable() -> None:
    # as a stored calibration comes back from JSON: lists, in any order
    costs = Costs(decode_curve=[[65536, 1.2e9], [4096, 4e8]])  # type: ignore[arg-type]
    assert costs.decode_curve == ((4096, 4e8), (65536, 1.2e9)) and hash(costs) == hash(
        Costs(decode_curve=((4096, 4e8), (65536, 1.2e9))))
    assert decode_rate(costs.decode_curve, 4096, 1.0) == pytest.approx(4e8)
    with pytest.raises(ValueError, match=re.escape("expected decode_curve points (chunk bytes > 0, bytes/s > 0). "
                                                   "Got (4096, 0.0) in ((4096, 0.0),) instead.")):
        Costs(decode_curve=((4096, 0.0),))


def test_report_gives_the_curves_rates() -> None:
    curve = ((4096, 4e8), (16000, 7e8), (4 << 20, 1.5e9))
    text = str(advise(dataset(), {"map": 1.0}, costs=Costs(decode_bps=1e9, decode_curve=curve)))
    assert "zstd 1500 MB/s per thread (700 in 16 kB chunks)" in text  # the curve's, not decode_bps
    one_point = str(advise(dataset(), {"map": 1.0}, costs=Costs(decode_curve=((512, 4e6),))))
    assert "zstd 4 MB/s per thread, ratio" in one_point  # no 16 kB rate that was never measured


def test_candidate_lengths_of_a_huge_dimension_come_quickly() -> None:
    from xarray_zarrmax.advise.candidates import _sizes

    sizes = _sizes(10**9)  # the divisor search took 26 s
    assert len(sizes) < 64 and {1, 2, 1250, 15625000, 10**9} <= set(sizes)  # powers, divisors, exact fits


def test_probe_decoder_times_each_chunk_size_below_the_sample() -> None:
    sample = np.cumsum(np.random.default_rng(0).normal(size=2**18)).astype("f4")  # 1 MiB, smooth
    probe = probe_decoder(sample, repeats=1, sizes=(4096, 65536, 2**20, 2**22))
    assert [n for n, _ in probe.curve] == [4096, 65536, 2**20]  # the sample itself last: not 4 MiB
    assert probe.curve[-1][1] == probe.decode_bps and all(r > 0 for _, r in probe.curve)
    assert 0 < probe.ratio < 1


def test_advise_returns_an_encoding_ready_for_to_zarr(tmp_path: Path) -> None:
    ds = dataset()
    report = advise(ds, {"timeseries": 0.5, "map": 0.5}, costs=Costs(ratio=1.0))
    assert set(report.best.encoding) == {"t2m"}
    enc = report.best.encoding["t2m"]
    assert set(enc) <= {"chunks", "shards"} and len(enc["chunks"]) == 3
    xarray_zarrmax.to_zarr(ds, str(tmp_path / "advised.zarr"), encoding=report.best.encoding)
    back = xr.open_dataset(str(tmp_path / "advised.zarr"), engine="zarrmax", chunks=None)
    assert back["t2m"].encoding["chunks"] == enc["chunks"]
    table = report.table
    assert len(table) == len(report.candidates) and table["score"].is_monotonic_increasing
    assert {"timeseries:requests", "map:bytes", "map:round_trips", "timeseries:seconds", "map:peak_mb"} <= set(
        table.columns)
    text = str(report)
    assert "layout advice for 't2m'" in text and "best: {'t2m'" in text and "no store probed" in text


def test_unknown_pattern_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "unknown access pattern 'heatmap': expected one of timeseries, map, region-mean, map-mean, full-scan, "
            "random-batch, or a selection {dim: slice} of your own")):
        advise(dataset(), {"heatmap": 1.0}, costs=Costs())


def test_missing_dimension_names_it_and_the_variables_dims() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "pattern 'levels' selects dimension 'level', which variable 't2m' does not have: its dimensions are "
            "('time', 'lat', 'lon')")):
        advise(dataset(), {"levels": (1.0, {"level": slice(0, 3)})}, costs=Costs())


@pytest.mark.parametrize("weight", [0, -1.0, float("nan")])
def test_weights_must_be_positive(weight: float) -> None:
    with pytest.raises(ValueError, match=re.escape(f"expected a positive weight for pattern 'map'. Got {weight!r}")):
        advise(dataset(), {"timeseries": 1.0, "map": weight}, costs=Costs())


@pytest.mark.parametrize(("task_bytes", "smallest"), [
    (0, "0.00458 MB, chunks 1x20x30"),  # one task per object: the smallest object
    (32 * 2**20, "0.169 MB, chunks 37x20x30"),  # small objects are grouped: every task reads the whole array
])
def test_impossible_budget_says_the_smallest_achievable(task_bytes: int, smallest: str) -> None:
    layouts = [Layout((37, 20, 30)), Layout((1, 20, 30)), Layout((1, 10, 10), (1, 20, 30))]
    with xarray_zarrmax.set_config(task_bytes=task_bytes), pytest.raises(ValueError, match=re.escape(
            f"no candidate layout of 3 meets every constraint: memory per task <= 0.001 MB (the smallest "
            f"achievable is {smallest})")) as info:
        advise(dataset(), {"map": 1.0}, costs=Costs(ratio=1.0), layouts=layouts, budget_mb=0.001)
    # grouped tasks: the message says what sets their size, and how to lower it
    assert ("set_config(task_bytes=...)" in str(info.value)) == bool(task_bytes)


def test_constraints_that_only_conflict_together() -> None:
    # 8.5 GB of encoded values in at most 1000 objects needs objects of 8.5 MB: not with 1 MB ones
    with pytest.raises(ValueError, match=re.escape(
            # the whole grid of issue 42, every layout of it checked (none met the constraints to bound the rest)
            "no candidate layout of 507820 meets every constraint: objects of <= 1 MB (the smallest achievable is "
            "8.32 MB with the other constraints, chunks 21x721x288); <= 1000 objects (the fewest achievable is "
            "8192 with the other constraints, chunks 161x361x9)")):
        rank(GEOS, DIMS, 4, {"map": 1.0}, costs=Costs(ratio=0.5), reader=Reader(),
             constraints=Constraints(max_object_bytes=2**20, max_objects=1000))


def test_probe_store_measures_and_cleans_up(tmp_path: Path) -> None:
    steps: list[tuple[int, int, str]] = []
    probe = probe_store(str(tmp_path), large=2**20, progress=lambda d, t, w: steps.append((d, t, w)))
    assert probe.local and probe.latency_s > 0 and probe.aggregate_bps >= probe.request_bps > 0
    assert probe.request_s >= 0 and probe.connect_s == 0  # no connections to a directory
    assert list(tmp_path.iterdir()) == []
    assert [d for d, _, _ in steps] == list(range(1, steps[0][1] + 1))


def test_probe_of_a_folder_that_does_not_exist_leaves_no_folder_behind(tmp_path: Path) -> None:
    """A probe beside a store not written yet (``to_zarr(..., encoding="advise")`` into new folders) makes
    the folders it needs and removes them after: a mistyped ``--store`` leaves no tree of empty folders."""
    probe_store(str(tmp_path / "new" / "deeper"), large=2**16, repeats=1, many=2, parallel=2)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    probe_store(str(tmp_path / "kept" / "new"), large=2**16, repeats=1, many=2, parallel=2)
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and list((tmp_path / "kept").iterdir()) == []


def test_advise_probes_the_store_with_a_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = advise(dataset(), {"random-batch": 1.0}, store=str(tmp_path))
    assert report.calibrated and report.reader.local and "store probed" in str(report)
    assert "probing [" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    quiet = advise(dataset(), {"random-batch": 1.0}, store=str(tmp_path), progress=False)
    assert quiet.calibrated and capsys.readouterr().err == ""


def test_predict_adds_work_per_request_and_per_chunk() -> None:
    """The work per request and per inner chunk is paid once per request and per chunk decoded; a connection
    once per request in flight."""
    layout = Layout((4, 5, 6), (16, 10, 12))
    counts = count_read(selections("full-scan"), SHAPE, 4, layout, 4 * 120, local_reader())
    assert counts.chunks == 10 * 4 * 5  # every inner chunk of the array, edge chunks included
    assert counts.decoded_bytes == counts.chunks * 4 * 120
    base = Costs(ratio=1.0)
    extra = predict(counts, Costs(ratio=1.0, request_s=1e-3, chunk_s=1e-4, index_s=1e-2), local_reader()) - predict(
        counts, base, local_reader())
    # every shard's index parsed: the 16 read whole as much as the 2 edge shards read through their index
    assert counts.objects == counts.indexes == 3 * 2 * 3 and counts.index_requests == 2
    assert extra == pytest.approx(counts.requests * 1e-3 + counts.chunks * 1e-4 + counts.indexes * 1e-2)
    remote = Reader(concurrency=16)
    extra = predict(counts, Costs(ratio=1.0, connect_s=1e-3), remote) - predict(counts, base, remote)
    assert counts.requests > 16 and extra == pytest.approx(16 * 1e-3)  # a connection per request in flight
    sparse = count_read(selections("map"), SHAPE, 4, layout, 4 * 120, local_reader())
    assert sparse.index_requests > 0
    extra = predict(sparse, Costs(ratio=1.0, index_s=1e-2), local_reader()) - predict(sparse, base, local_reader())
    assert extra == pytest.approx(sparse.indexes * 1e-2)


def test_probe_reader_measures_work_per_chunk_request_and_shard_index() -> None:
    work = probe_reader(np.random.default_rng(0).random(10_000).astype("f4"), chunks=256)
    # Far below a millisecond each. The request's and the index's are differences of timings, set to 0 when
    # noise makes them negative (a CI run with two busy workers measured request_s 0.0): only the chunk's, 255
    # more chunks decoded against one, is always real work.
    assert 0 < work.chunk_s < 1e-3 and 0 <= work.request_s < 1e-3 and 0 <= work.index_s < 1e-3
    assert 0 < work.index_entry_s < 1e-6  # nanoseconds an entry


def test_index_work_grows_with_the_entries_of_each_index_parsed() -> None:
    reader = Reader(local=True)
    few, many = (count_read([(Axis(5, 6), Axis(0, 20), Axis(0, 30))], SHAPE, 4, Layout((1, 5, 6), shards), 120,
                            reader) for shards in ((8, 10, 12), (37, 20, 30)))
    assert few.index_entries == few.indexes * 8 * 2 * 2 and many.index_entries == many.indexes * 37 * 4 * 5
    for counts in (few, many):
        extra = predict(counts, Costs(index_entry_s=1e-6), reader) - predict(counts, Costs(), reader)
        assert extra == pytest.approx(counts.index_entries * 1e-6)


def test_probe_reader_refuses_an_empty_sample() -> None:
    with pytest.raises(ValueError, match="non-empty sample.*Got 0 elements"):
        probe_reader(np.zeros((3, 0), dtype="f4"))


def test_probe_decoder_ratio() -> None:
    compressible = probe_decoder(np.zeros(2**18, dtype="f4"))
    noise = probe_decoder(np.random.default_rng(0).random(2**18))
    assert compressible.ratio < 0.01 < 0.5 < noise.ratio and compressible.decode_bps > 0


def test_cli_advise_probes_with_a_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "d.zarr")
    dataset().to_zarr(path, zarr_format=3, mode="w", consolidated=True)
    assert main(["advise", path, "--pattern", "timeseries:0.5", "--pattern", "map:0.3", "--pattern",
                 "random-batch:0.1", "--batch-window", "time=4,lat=5", "--batch-count", "3",
                 "--select", "box:0.2:time=3:30,lon=7", "--top", "3"]) == 0
    captured = capsys.readouterr()
    assert "probing [" in captured.err and "6/6 DELETE probe objects" in captured.err
    assert "store probed: latency" in captured.out and "best: {'t2m': {'chunks': (" in captured.out
    assert "timeseries:requests" in captured.out  # the table's first rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr"]  # probed beside the store, cleaned up


@pytest.mark.parametrize(("url", "parent"), [("s3://b/x/y.zarr", "s3://b/x"), ("s3://b/y.zarr/", "s3://b"),
                                             ("/d/y.zarr", "/d"), ("y.zarr", "."), ("file:///d/y.zarr", "file:///d"),
                                             ("/y.zarr", "/"), ("file:///y.zarr", "file:///"), ("d/", ".")])
def test_probes_beside_the_store(url: str, parent: str) -> None:
    from xarray_zarrmax.advise.probe import probe_place

    assert probe_place(url) == parent


def test_random_batch_windows_follow_the_batch() -> None:
    windows = pattern_selections("random-batch", 1.0, DIMS, SHAPE, batch=Batch(5, {"lat": 3, "lon": 40}))
    assert len(windows) == 5
    assert {tuple(a.size for a in w) for w in windows} == {(8, 3, 30)}  # the lon window is clipped to the array
    with pytest.raises(ValueError, match=re.escape(
            "pattern 'random-batch' selects dimension 'level', which variable 't2m' does not have: its dimensions "
            "are ('time', 'lat', 'lon')")):
        advise(dataset(), {"random-batch": 1.0}, costs=Costs(), batch=Batch(window={"level": 2}))


def test_cli_advise_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "d.zarr")
    dataset().to_zarr(path, zarr_format=3, mode="w", consolidated=True)
    # usage errors, refused before the store is opened: status 2 (tests/test_cli.py has the rest)
    assert main(["advise", path, "--no-probe", "--pattern", "heatmap:1"]) == 2
    assert "--pattern 'heatmap:1': unknown pattern 'heatmap'" in capsys.readouterr().err
    assert main(["advise", path, "--no-probe", "--pattern", "map"]) == 2
    assert ("--pattern 'map': expected NAME:WEIGHT with a number WEIGHT, e.g. timeseries:0.5"
            in capsys.readouterr().err)
    assert main(["advise", path, "--no-probe", "--pattern", "map:1", "--batch-window", "lat=1:3"]) == 2
    assert "--batch-window 'lat=1:3': expected DIM=SIZE for dimension 'lat'. Got '1:3'." in capsys.readouterr().err
