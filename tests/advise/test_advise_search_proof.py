"""Issue 42, causes 3 and 5: the search proves what it prunes. Every bound `SearchBounds` gives is, term by
term, no more than the model's prediction (for each layout, for a layout's quick bound, and for every sharding
of a chunk shape at once); `could_tie` never rules out a layout the model ties with the fastest; and the search
costs every layout of the grid that is the fastest or tied with it, on random arrays, costs and patterns of
every kind (boxes, lists of boxes, points, batches with repeated windows) and both readers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xarray_zarrmax.advise import Batch, Costs, Points, Reader, pattern_selections, rank
from xarray_zarrmax.advise.bounds import PAIRWISE, QUICK, RANGES, SAMPLED, TERMS, SearchBounds
from xarray_zarrmax.advise.candidates import candidate_layouts, multiples
from xarray_zarrmax.advise.model import Layout, could_beat
from xarray_zarrmax.advise.patterns import normalized, parse_patterns, weight
from xarray_zarrmax.advise.search import could_tie

DIMS = ("time", "lev", "lat", "lon")


def _case(seed: int) -> tuple[tuple[int, ...], tuple[str, ...], dict, Costs, Reader]:
    """A random small array, mix (every pattern kind), costs (with and without spread) and reader."""
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(2, 5))
    shape = tuple(int(n) for n in rng.integers(3, 24 if ndim < 4 else 10, ndim))
    dims = DIMS[:ndim]
    latency = float(rng.choice([1e-5, 1e-3, 0.02]))
    decode_bps, speedup = float(rng.choice([2e8, 1e9])), float(rng.choice([0.9, 1.3, 1.9]))
    spread = ((("latency_s", latency * 0.9, latency * 1.2), ("request_bps", 6e7, 9e7), ("request_s", 2e-5, 5e-5),
               ("decode_bps", decode_bps * 0.8, decode_bps * 1.1), ("decode_speedup", speedup * 0.7, speedup * 1.2))
              if rng.integers(0, 2) else ())
    costs = Costs(latency_s=latency, request_bps=8e7, decode_bps=decode_bps,
                  ratio=float(rng.choice([0.3, 1.0])), request_s=float(rng.choice([0.0, 3e-5])),
                  chunk_s=float(rng.choice([0.0, 2e-5])), index_s=float(rng.choice([0.0, 5e-5])),
                  index_entry_s=float(rng.choice([0.0, 1e-8])), connect_s=float(rng.choice([0.0, 3e-4])),
                  decode_speedup=((2, speedup),), spread=spread,
                  speedup_curve=((256, speedup * 0.6), (4096, speedup)) if rng.integers(0, 2) else (),
                  local=bool(rng.integers(0, 2)))
    reader = Reader(local=costs.local, threads=int(rng.integers(1, 3)), concurrency=int(rng.choice([2, 16, 128])),
                    full_shard_fraction=float(rng.choice([0.25, 0.5, 1.0])),
                    inflight_bytes=int(rng.choice([512 << 20, 4096, 40000])),
                    split_size=int(rng.choice([16 << 20, 2000])), coalesce_gap=int(rng.choice([1 << 20, 100])))
    count = int(rng.integers(1, 12))
    points = {dims[-1]: rng.integers(0, shape[-1], count).tolist()}
    if rng.integers(0, 2):
        points[dims[-2]] = rng.integers(0, shape[-2], count).tolist()
    windows = int(rng.integers(1, 12))
    window = {d: int(rng.integers(1, n + 1)) for d, n in zip(dims, shape, strict=True)}
    positions = [{d: int(rng.integers(0, n - window[d] + 1)) for d, n in zip(dims, shape, strict=True)}
                 for _ in range(windows)]
    positions += positions[:int(rng.integers(0, windows + 1))]  # windows read again: their indexes are cached
    boxes = [{dims[0]: int(rng.integers(0, shape[0]))} for _ in range(int(rng.integers(1, 5)))]
    every = {"points": (1.0, Points(points)), "batch": (0.5, Batch(window=window, positions=positions)),
             "timeseries": 0.3, "boxes": (0.7, boxes)}
    names = [str(n) for n in rng.permutation(list(every))[:int(rng.integers(1, 5))]]
    return shape, dims, {n: every[n] for n in names}, costs, reader


def _scattered(shape: tuple[int, ...], count: int, seed: int) -> dict[str, object]:
    """A mix of one read of ``count`` distinct random points along every dimension of an array of ``shape``."""
    rng = np.random.default_rng(seed)
    cells = np.unravel_index(rng.choice(math.prod(shape), size=count, replace=False), shape)
    return {"points": (1.0, Points(dict(zip(DIMS[-len(shape):], (c.tolist() for c in cells), strict=True))))}


def _sharded_sample(shape: tuple[int, ...], mix: dict[str, object], costs: Costs, reader: Reader,
                    seed: int) -> tuple[SearchBounds, list[Layout]]:
    """The search's bounds of ``mix`` and 300 of the grid's sharded layouts, drawn at random."""
    patterns = parse_patterns(mix)
    dims = DIMS[-len(shape):]
    bounds = SearchBounds({n: pattern_selections(n, s, dims, shape) for n, s in patterns.items()},
                          {n: weight(s) for n, s in patterns.items()}, shape, 4, costs, reader)
    layouts = [lay for lay in candidate_layouts(shape, 4) if lay.shards is not None]
    return bounds, [layouts[i] for i in np.random.default_rng(seed).permutation(len(layouts))[:300]]


def _rows(layouts: list[Layout]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (np.asarray([lay.chunks for lay in layouts]), np.asarray([lay.outer for lay in layouts]),
            np.asarray([lay.shards is not None for lay in layouts]),
            np.asarray([lay.chunks_per_object() for lay in layouts], dtype=float))


def _below(row: np.ndarray, terms: dict[str, float]) -> bool:
    """Each bounded term at most the prediction's (the transfer of unknown rate with the known ones, at most the
    predicted transfer)."""
    tolerance = 1e-9
    transfer = terms.get("request_bps", 0.0) + terms.get("aggregate_bps", 0.0)
    for j, name in enumerate(TERMS):
        if name == "transfer":
            known = row[TERMS.index("request_bps")] + row[TERMS.index("aggregate_bps")]
            if row[j] + known > transfer * (1 + tolerance) + 1e-15:
                return False
        elif row[j] > terms.get(name, 0.0) * (1 + tolerance) + 1e-15:
            return False
    return True


@pytest.mark.usefixtures("bound_kernels")
@pytest.mark.parametrize("seed", range(12))
def test_every_bound_is_below_the_prediction_term_by_term(seed: int) -> None:
    """Was: the bound took a local read's decode on two threads (the model: one, below JOB_BYTES), counted a
    pointwise read as one chunk of no bytes, and left out what the reader's in-flight bytes and split parts add;
    each right as a bound, each too loose to prove a 4-D search."""
    shape, dims, mix, costs, reader = _case(seed)
    patterns = parse_patterns(mix)
    selections = {n: pattern_selections(n, s, dims, shape) for n, s in patterns.items()}
    bounds = SearchBounds(selections, {n: weight(s) for n, s in patterns.items()}, shape, 4, costs, reader)
    layouts = list(candidate_layouts(shape, 4))
    layouts = [layouts[i] for i in np.random.default_rng(seed).permutation(len(layouts))[:400]]
    predicted = {c.layout: c for c in rank(shape, dims, 4, mix, costs=costs, reader=reader, layouts=layouts)}
    chunks, outer, sharded, per_object = _rows(layouts)
    levels = {level: bounds.terms(chunks, outer, sharded, per_object, level)
              for level in (QUICK, PAIRWISE, SAMPLED, RANGES)}
    refined = levels[RANGES]
    whole = np.broadcast_to(np.asarray(shape), chunks.shape)
    any_sharding = bounds.terms(chunks, whole, np.ones(len(layouts), dtype=bool), np.ones(len(layouts)), QUICK)
    # LISTED: a sharded layout as its chunk shape's bound of every sharding, raised by its own shards
    shard_rows = [i for i, lay in enumerate(layouts) if lay.shards is not None]
    ks = outer[shard_rows] // chunks[shard_rows]
    matches = multiples(chunks[shard_rows], shape) == ks[:, :, None]
    assert matches.any(axis=2).all()  # the grid's shardings: 1, 2, 8 or all chunks along each dimension
    which = np.argmax(matches, axis=2)
    listed_rows = bounds.sharded_floor(any_sharding[shard_rows], chunks[shard_rows], np.arange(len(shard_rows)),
                                       which)
    listed = dict(zip(shard_rows, listed_rows, strict=True))
    # and raised by the alignment of its pointwise reads' shards (`SearchBounds.aligned`, the second phase's filter)
    aligned = dict(zip(shard_rows, bounds.aligned(listed_rows, chunks[shard_rows], outer[shard_rows],
                                                  per_object[shard_rows]), strict=True))
    for i, layout in enumerate(layouts):
        terms = dict(predicted[layout].terms)
        for level, rows in levels.items():
            assert _below(rows[i], terms), (layout, level, dict(zip(TERMS, rows[i], strict=True)), terms)
        if i in listed:
            assert _below(listed[i], terms), (layout, "listed", dict(zip(TERMS, listed[i], strict=True)), terms)
            assert _below(aligned[i], terms), (layout, "aligned", dict(zip(TERMS, aligned[i], strict=True)), terms)
        if layout.shards is not None:
            assert _below(any_sharding[i], terms), (layout, dict(zip(TERMS, any_sharding[i], strict=True)), terms)
        # the key orders the search: below both the score and the low end of its range
        key = float(refined[i] @ bounds.key_factors)
        assert key <= min(predicted[layout].score, predicted[layout].low) * (1 + 1e-9) + 1e-15


@pytest.mark.parametrize("local", [False, True])
def test_could_tie_agrees_with_the_models_tie_on_exact_terms(local: bool) -> None:
    """On a layout's own terms (its transfer under the rate the model charged it), `could_tie` is the model's
    paired tie (`could_beat`); with the transfer's rate unknown, or less of any term, it only says yes more."""
    shape, dims = (40, 20, 30), DIMS[:3]
    costs = Costs(latency_s=0.01, request_bps=8e7, aggregate_bps=1e9, request_s=5e-5, chunk_s=1e-5, local=local,
                  spread=(("latency_s", 0.002, 0.05), ("request_bps", 1e7, 5e8), ("aggregate_bps", 2e8, 1e10),
                          ("request_s", 0.0, 5e-4), ("decode_bps", 1e8, 5e9)))
    ranked = rank(shape, dims, 4, {"timeseries": 1.0, "map": 1.0}, costs=costs, reader=Reader(local=local),
                  layouts=list(candidate_layouts(shape, 4)))
    fastest = min(ranked, key=lambda c: c.score)
    rows = np.asarray([[c.terms.get(name, 0.0) for name in TERMS] for c in ranked])
    tied = could_tie(rows, fastest.terms, costs)
    assert list(tied) == [could_beat(c.terms, fastest.terms, costs) for c in ranked]
    assert 1 < tied.sum() < len(ranked)  # ties to agree on, and layouts that do not tie
    unknown = rows.copy()
    unknown[:, TERMS.index("transfer")] = rows[:, TERMS.index("request_bps")] + rows[:, TERMS.index("aggregate_bps")]
    unknown[:, [TERMS.index("request_bps"), TERMS.index("aggregate_bps")]] = 0.0
    assert (could_tie(unknown, fastest.terms, costs) >= tied).all()
    assert (could_tie(rows * 0.5, fastest.terms, costs) >= tied).all()


def test_could_tie_takes_both_decode_terms_at_one_rate_as_the_model_does() -> None:
    """Rows paying the decode on one thread and on the pool in any mix (a local mix holds both), against a best
    that pays them otherwise: `could_tie` is `could_beat` on exact terms, and says yes at least as often on
    less. Taken each at its own end of the rate's spread, 1,000 random rows disagree."""
    rng = np.random.default_rng(5)
    costs = Costs(latency_s=0.01, decode_bps=1e9, decode_speedup=((2, 1.5),),
                  spread=(("latency_s", 0.009, 0.011), ("decode_bps", 5e8, 2e9), ("decode_speedup", 1.0, 1.9)))
    best = {"latency_s": 0.1, "decode_bps": 0.02, "decode_pool": 0.05}
    rows = np.zeros((1000, len(TERMS)))
    rows[:, TERMS.index("latency_s")] = 0.1
    for name in ("decode_bps", "decode_pool"):
        rows[:, TERMS.index(name)] = rng.uniform(0, 0.1, 1000) * rng.integers(0, 2, 1000)
    tied = could_tie(rows, best, costs)
    assert list(tied) == [could_beat(dict(zip(TERMS, row, strict=True)), best, costs) for row in rows]
    assert 100 < tied.sum() < 900
    assert (could_tie(rows * 0.5, best, costs) >= tied).all()


@pytest.mark.parametrize("seed", range(8))
def test_the_search_costs_the_fastest_and_every_layout_tied_with_it(seed: int) -> None:
    """Against costing the whole grid: the search's fastest is at least as fast as the grid's, and every layout
    of the grid tied with it (the model's paired tie, under the costs' spread) was costed."""
    shape, dims, mix, costs, reader = _case(200 + seed)
    found = rank(shape, dims, 4, mix, costs=costs, reader=reader)
    every = rank(shape, dims, 4, mix, costs=costs, reader=reader, layouts=list(candidate_layouts(shape, 4)))
    fastest = min(found, key=lambda c: c.score)
    assert fastest.score <= min(c.score for c in every) * (1 + 1e-12)
    costed = {c.layout for c in found}
    tied = [c.layout for c in every if could_beat(c.terms, fastest.terms, costs)]
    grid = {c.layout for c in every}
    assert tied or fastest.layout not in grid  # on the grid, the fastest ties with itself at least
    assert set(tied) <= costed
    assert len(found) < len(every) or len(every) < 50  # and it pruned


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("wide", [False, True], ids=["case's spread", "wide spread"])
def test_every_layout_left_uncosted_is_ruled_out_by_its_bound(seed: int, wide: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The search's contract, layout by layout over the whole grid (not only the fastest and its ties): one left
    uncosted has a bound (its own, `SearchBounds.terms`) that sums to more than the ``starts``-th fastest score
    of the first phase, and that proves it slower than the fastest's slow end or unable to tie with it. A wide
    spread (a noisy probe) leaves many layouts that only the second phase (what could tie) costs."""
    import dataclasses

    from xarray_zarrmax.advise import advisor
    from xarray_zarrmax.advise.search import branch_and_bound, high

    shape, dims, mix, costs, reader = _case((400 if wide else 300) + seed)
    if wide:
        costs = dataclasses.replace(costs, spread=(
            ("latency_s", costs.latency_s * 0.3, costs.latency_s * 3), ("request_bps", 2e7, 3e8),
            ("decode_bps", costs.decode_bps * 0.3, costs.decode_bps * 3)))
    costed: dict[Layout, int] = {}
    first_phase: list[float] = []

    def watched(shape_, grid, bounds, cost, progress, total, budget=None, polish=None, starts=1,  # type: ignore[no-untyped-def]
                feasible=None, seconds=None):  # (the proof, however long it takes: no time budget)
        def cost_seen(layout: Layout):  # type: ignore[no-untyped-def]
            costed[layout] = costed.get(layout, 0) + 1
            return cost(layout)

        def polish_seen(ranked):  # type: ignore[no-untyped-def]
            first_phase.append(max(c.score for c in ranked) if len(ranked) >= starts else math.inf)
            return polish(ranked)

        return branch_and_bound(shape_, grid, bounds, cost_seen, progress, total, budget, polish_seen, starts,
                                feasible)

    monkeypatch.setattr(advisor, "branch_and_bound", watched)
    found, outcome = advisor.search(shape, dims, 4, mix, costs=costs, reader=reader)
    assert outcome is not None and outcome.complete and first_phase
    # each layout costed once and counted once (a seed too, when its entry comes up)
    assert set(costed.values()) == {1} and outcome.costed == len(costed), (outcome, len(costed))
    # the bounds, and the fastest's numbers, in the search's own scale (the weights times a power of two)
    patterns, exponent = normalized(parse_patterns(mix))
    fastest = min(found, key=lambda c: c.score).scaled(-exponent)
    bounds = SearchBounds({n: pattern_selections(n, spec, dims, shape) for n, spec in patterns.items()},
                          {n: weight(spec) for n, spec in patterns.items()}, shape, 4, costs, reader)
    left = [lay for lay in candidate_layouts(shape, 4) if lay not in costed]
    assert left  # something was pruned
    rows = bounds.terms(*_rows(left))
    assert (rows.sum(axis=1) > first_phase[0]).all()
    ruled_out = (rows @ bounds.key_factors > high(fastest)) | ~could_tie(rows, fastest.terms, costs)
    assert ruled_out.all(), [str(lay) for lay, r in zip(left, ruled_out, strict=True) if not r][:5]


def test_the_search_proves_a_4d_batch_on_a_remote_store() -> None:
    """Was (cause 3): a 4-D random batch on a remote store could not be proven: its bounds ignored the index
    round trip of each window that reads a new shard by ranges, so 45,000-165,000 layouts of the grid stayed
    within reach and the search stopped at its budget. Then 254 were costed, all but 4 of them only because the
    bound took one request and no gap for the chunks a window reads from a shard. The count of layouts is the
    measure here (time is in asv_bench.tables.advise_search_time)."""
    from xarray_zarrmax.advise import advisor

    shape = (48, 16, 181, 288)
    # what the probe of MinIO behind +20 ms measured in the validation run (docs/dev/logs/advise_validation.json)
    costs = Costs.from_dict({
        "format": "xarray_zarrmax.advise.Costs", "version": 1, "store": "remote", "latency_s": 0.02194,
        "request_s": 0.0002621, "connect_s": 0.0002811, "index_s": 3.297e-05, "index_entry_s": 1.764e-08,
        "chunk_s": 8.18e-06, "request_bps": 1.139e9, "aggregate_bps": 1.566e9, "decode_bps": 1.075e9,
        "ratio": 0.6894, "decode_curve": [[4096, 4.258e8], [16384, 7.473e8], [65536, 9.353e8], [262144, 1.069e9],
                                          [1048576, 1.182e9], [3336192, 1.075e9]],
        "decode_speedup": [[2, 1.893]],
        "spread": {"aggregate_bps": [1.367e9, 1.648e9], "connect_s": [0.0002811, 0.0005394],
                   "decode_bps": [1.071e9, 1.112e9], "latency_s": [0.02193, 0.02209],
                   "request_bps": [9.521e8, 1.156e9], "request_s": [0.0002621, 0.0003163]}})
    batch = Batch(12, {"time": 4, "lev": 8, "lat": 32, "lon": 32}, seed=7)
    reader = Reader(threads=2, task_bytes=128 << 20)  # what advise() builds from the default config, 2 cores
    ranked, outcome = advisor.search(shape, DIMS, 2, {"batch": (1.0, batch)}, costs=costs, reader=reader)
    assert outcome is not None and outcome.complete
    # 4 here; 254 before the bound counted each window's ranges (`bounds.RANGES`), and before the index round
    # trips (issue 42's first fix) the search stopped at its budget of 3,000 unproven
    assert outcome.costed < 20, outcome
    assert math.isfinite(ranked[0].score)


def _bound_and_prediction(shape: tuple[int, ...], dims: tuple[str, ...], mix: dict, layout: Layout, costs: Costs,
                          reader: Reader) -> tuple[np.ndarray, dict[str, float]]:
    patterns = parse_patterns(mix)
    selections = {n: pattern_selections(n, s, dims, shape) for n, s in patterns.items()}
    bounds = SearchBounds(selections, {n: weight(s) for n, s in patterns.items()}, shape, 4, costs, reader)
    predicted = rank(shape, dims, 4, mix, costs=costs, reader=reader, layouts=[layout])[0]
    return bounds.terms(*_rows([layout]))[0], dict(predicted.terms)


def test_a_local_shard_streamed_at_its_first_touch_adds_no_untouched_bytes() -> None:
    """Found by review: a window touching half a local shard's chunks reads it "whole" by the remote rule, but the
    local reader streams touched chunks of 2 MiB and more after the index (`counting._object_fetch`); the bound
    added the untouched chunks' bytes, twice the model's transfer."""
    shape, dims = (8, 512, 1024), DIMS[:3]
    window = {"time": 2, "lev": 512, "lat": 1024}
    mix = {"batch": (1.0, Batch(window=window, positions=[{"time": 0}, {"time": 4}]))}
    costs = Costs(latency_s=0.0, request_bps=1e9, aggregate_bps=1e9, decode_bps=1e12, local=True)
    row, terms = _bound_and_prediction(shape, dims, mix, Layout((1, 512, 1024), (4, 512, 1024)), costs,
                                       Reader(local=True))
    assert _below(row, terms), (dict(zip(TERMS, row, strict=True)), terms)


@pytest.mark.parametrize("local", [True, False], ids=["local", "remote"])
def test_a_batchs_windows_decode_in_the_calling_thread_each_as_our_reader_decides(local: bool) -> None:
    """Was: the model chose one thread or the pool on a pattern's whole decode, but our reader chooses read by
    read (`local_reads.local_jobs`): 16 local windows of 1 MiB each (16 MiB in all) were charged the pool's
    speedup though each decodes in the calling thread. On this session's machine such local batches measured
    1.5-3x their prediction. A remote read always decodes on the pool; so does a local window over JOB_BYTES."""
    from xarray_zarrmax.config import set_config
    from xarray_zarrmax.read.local_reads import local_jobs
    from xarray_zarrmax.tuning import JOB_BYTES

    shape, dims = (64, 512, 512), DIMS[:3]
    window = {"time": 4, "lev": 256, "lat": 256}  # 1 MiB of float32
    positions = [{"time": 4 * (i % 16), "lev": 256 * (i % 2), "lat": 256 * (i // 2 % 2)} for i in range(16)]
    mix = {"batch": (1.0, Batch(window=window, positions=positions))}
    costs = Costs(latency_s=1e-4, request_bps=1e9, aggregate_bps=2e9, decode_bps=5e8, decode_speedup=((2, 1.8),),
                  local=local)
    reader = Reader(local=local, threads=2)
    with set_config(threads=2):
        assert local_jobs(1 << 20) == 1 and local_jobs(JOB_BYTES) > 1  # the reader's own rule, read by read
    one_window = 4 * 256 * 256 * 4 / costs.decode_bps
    for layout, small in ((Layout((4, 256, 256)), True), (Layout((4, 256, 256), (16, 512, 512)), True),
                          (Layout((16, 512, 512)), False)):  # a window in one 16 MiB chunk: the pool
        patterns = parse_patterns(mix)
        selections = {n: pattern_selections(n, s, dims, shape) for n, s in patterns.items()}
        bounds = SearchBounds(selections, {n: weight(s) for n, s in patterns.items()}, shape, 4, costs, reader)
        terms = dict(rank(shape, dims, 4, mix, costs=costs, reader=reader, layouts=[layout])[0].terms)
        if local and small:
            assert terms["decode_bps"] == pytest.approx(16 * one_window) and not terms.get("decode_pool"), terms
        else:
            assert not terms.get("decode_bps") and terms["decode_pool"] > 0, terms
        for level in (QUICK, PAIRWISE, SAMPLED, RANGES):
            row = bounds.terms(*_rows([layout]), level)[0]
            assert _below(row, terms), (layout, level, dict(zip(TERMS, row, strict=True)), terms)
            # the decode is exact in the bound: both terms
            for name in ("decode_bps", "decode_pool"):
                assert row[TERMS.index(name)] == pytest.approx(terms.get(name, 0.0)), (layout, level, name)


def test_the_transfer_goes_under_per_request_bandwidth_only_when_no_read_can_exceed_it() -> None:
    """Found by review: the most requests a read can send was taken from the bound of its bytes, which leaves out
    the untouched chunks of a shard read whole in split_size parts; the model's 14 parts reach aggregate_bps
    while the bound put the transfer under request_bps (`could_tie` scales the two by different spreads)."""
    row, terms = _bound_and_prediction((1, 31), DIMS[:2], {"points": (1.0, Points({"lev": [30]}))},
                                       Layout((1, 8), (1, 16)), Costs(latency_s=0.0, request_bps=8e7,
                                                                      aggregate_bps=1e9),
                                       Reader(split_size=7, concurrency=16))
    assert _below(row, terms), (dict(zip(TERMS, row, strict=True)), terms)


def test_ties_do_not_depend_on_the_scale_of_the_weights() -> None:
    """Found by review: `could_beat` allowed an absolute 1e-12 s of rounding, so with weights of 1e-9 (scores of
    1e-11 s) layouts 0.1-0.2% slower than the fastest counted as tied, and the search (rightly) never costed
    them. The tolerance is relative: the same layouts tie whatever the weights' scale, and all are costed. (The
    review's array was 48 x 30 x 45, 33,000 layouts costed twice: 45 s of a CI run. On this one, 4,446, the
    absolute tolerance leaves 511 tied layouts uncosted.)"""
    shape, dims = (16, 12, 15), DIMS[:3]
    costs = Costs(latency_s=0.02, request_s=3e-5, chunk_s=1e-5, index_s=5e-5, ratio=0.5)
    grid = list(candidate_layouts(shape, 4))
    ties = []
    for w in (1.0, 1e-9):
        mix = {"timeseries": w, "map": w}
        found = rank(shape, dims, 4, mix, costs=costs, reader=Reader())
        every = rank(shape, dims, 4, mix, costs=costs, reader=Reader(), layouts=grid)
        fastest = min(found, key=lambda c: c.score)
        tied = {c.layout for c in every if could_beat(c.terms, fastest.terms, costs)}
        assert tied <= {c.layout for c in found}
        ties.append(tied)
    assert ties[0] == ties[1]


@pytest.mark.parametrize("seed", [3, 5, 11, 14, 31])  # 3, 11 and 31 see a neighbour that could tie
def test_refining_leaves_uncosted_only_neighbours_that_cannot_tie(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local search off the grid costs a neighbour when it could be a step (its bound within the current
    score) or could tie with the fastest it returns (as the search does for the grid's layouts, under a wide
    spread): every neighbour it looked at and left uncosted is ruled out by its bound."""
    import dataclasses

    from xarray_zarrmax.advise import advisor
    from xarray_zarrmax.advise.search import branch_and_bound, layout_terms, tied_with

    shape, dims, mix, costs, reader = _case(500 + seed)
    costs = dataclasses.replace(costs, spread=(
        ("latency_s", costs.latency_s * 0.3, costs.latency_s * 3), ("request_bps", 2e7, 3e8),
        ("decode_bps", costs.decode_bps * 0.3, costs.decode_bps * 3)))
    seen: list[Layout] = []
    polished: list = []
    real_neighbours = advisor.neighbours

    def neighbours_seen(layout: Layout, shape_: tuple[int, ...], itemsize: int) -> list[Layout]:
        near = real_neighbours(layout, shape_, itemsize)
        seen.extend(near)
        return near

    def watched(shape_, grid, bounds, cost, progress, total, budget=None, polish=None, starts=1,  # type: ignore[no-untyped-def]
                feasible=None, seconds=None):  # (the proof, however long it takes: no time budget)
        def polish_seen(ranked):  # type: ignore[no-untyped-def]
            polished.append(polish(ranked))
            return polished[-1]

        return branch_and_bound(shape_, grid, bounds, cost, progress, total, budget, polish_seen, starts, feasible)

    monkeypatch.setattr(advisor, "neighbours", neighbours_seen)
    monkeypatch.setattr(advisor, "branch_and_bound", watched)
    found, _ = advisor.search(shape, dims, 4, mix, costs=costs, reader=reader)
    costed = {c.layout for c in found}
    left = [lay for lay in dict.fromkeys(seen) if lay not in costed]
    assert polished and seen and left, (len(seen), len(left))
    patterns, _ = normalized(parse_patterns(mix))  # as the search weighs them (``polished``: its own numbers)
    bounds = SearchBounds({n: pattern_selections(n, spec, dims, shape) for n, spec in patterns.items()},
                          {n: weight(spec) for n, spec in patterns.items()}, shape, 4, costs, reader)
    assert not tied_with(bounds, layout_terms(bounds, left), polished[0]).any()


def test_a_layout_with_the_fastests_terms_ties_even_at_an_infinite_factor(bound_kernels: str) -> None:
    """A rate's spread whose low end is so near 0 that its factor overflows to infinity: a row whose terms are the
    fastest's own still ties, for the search's test and the model's (an equal term adds nothing, where 0 x inf made a
    NaN that ruled the tie out), and a row a hair slower on a spread-free term still does not."""
    costs = Costs(latency_s=0.02, request_bps=8e7, spread=(("request_bps", 1e-310, 9e7),))
    assert costs.factors()["request_bps"][1] == math.inf
    best = {name: 0.01 * (i + 1) for i, name in enumerate(TERMS) if name != "transfer"}
    own = np.asarray([[best.get(name, 0.0) for name in TERMS]])
    assert could_tie(own, best, costs).tolist() == [True] and could_beat(best, best, costs)
    slower = own.copy()
    slower[0, TERMS.index("chunk_s")] *= 1.001
    assert could_tie(slower, best, costs).tolist() == [False]
    assert not could_beat({**best, "chunk_s": best["chunk_s"] * 1.001}, best, costs)


@pytest.mark.usefixtures("bound_kernels")
def test_the_aligned_requests_raise_listed_bounds_of_scattered_points_and_stay_below() -> None:
    """Scattered points on a 4-D array read from an object store (the case the second phase's filter is for): the
    requests of many sharded layouts' `LISTED` bounds are raised by their shards' alignment (`SearchBounds.aligned`),
    and every raised row stays, term by term, at most the model's prediction."""
    shape, dims = (40, 10, 30, 36), DIMS
    mix = _scattered(shape, 20, 42)
    costs = Costs(latency_s=0.02, request_bps=8e7, request_s=8e-4, connect_s=3e-4, local=False)
    reader = Reader(local=False)
    bounds, layouts = _sharded_sample(shape, mix, costs, reader, 42)
    chunks, outer, _, per_object = _rows(layouts)
    whole = np.broadcast_to(np.asarray(shape), chunks.shape)
    floor = bounds.terms(chunks, whole, np.ones(len(layouts), dtype=bool), np.ones(len(layouts)), QUICK)
    which = np.argmax(multiples(chunks, shape) == (outer // chunks)[:, :, None], axis=2)
    listed = bounds.sharded_floor(floor, chunks, np.arange(len(layouts)), which)
    aligned = bounds.aligned(listed, chunks, outer, per_object)
    raised = aligned[:, TERMS.index("request_s")] > listed[:, TERMS.index("request_s")] * 1.5
    assert raised.sum() >= 100, raised.sum()
    predicted = {c.layout: c for c in rank(shape, dims, 4, mix, costs=costs, reader=reader, layouts=layouts)}
    for i, layout in enumerate(layouts):
        terms = dict(predicted[layout].terms)
        assert _below(aligned[i], terms), (layout, dict(zip(TERMS, aligned[i], strict=True)), terms)


@pytest.mark.usefixtures("bound_kernels")
def test_the_merged_gaps_raise_pairwise_bounds_of_scattered_points_and_stay_below() -> None:
    """Scattered points on a 4-D array on an object store, compressed chunks partly outside the array: from `PAIRWISE`
    on, a sharded layout's bound holds the bytes between the chunks its runs merge (`merges.point_breaks`, ranked), so
    its transfer is above `QUICK`'s for many layouts (where the ranges' level alone had them), and every row stays,
    term by term, at most the model's prediction."""
    shape, dims = (45, 10, 31, 37), DIMS
    mix = _scattered(shape, 24, 43)
    costs = Costs(latency_s=0.02, request_bps=8e7, request_s=8e-4, connect_s=3e-4, ratio=0.4, local=False)
    reader = Reader(local=False, coalesce_gap=4000)
    bounds, layouts = _sharded_sample(shape, mix, costs, reader, 43)
    chunks, outer, sharded, per_object = _rows(layouts)
    quick, pairwise = (bounds.terms(chunks, outer, sharded, per_object, level) for level in (QUICK, PAIRWISE))
    moved = [TERMS.index(name) for name in ("request_bps", "aggregate_bps", "transfer")]
    raised = pairwise[:, moved].sum(axis=1) > quick[:, moved].sum(axis=1) * 1.01
    assert raised.sum() >= 30, raised.sum()
    predicted = {c.layout: c for c in rank(shape, dims, 4, mix, costs=costs, reader=reader, layouts=layouts)}
    for i, layout in enumerate(layouts):
        terms = dict(predicted[layout].terms)
        assert _below(pairwise[i], terms), (layout, dict(zip(TERMS, pairwise[i], strict=True)), terms)


@pytest.mark.usefixtures("bound_kernels")
def test_profiles_through_several_chunks_raise_pairwise_bounds_and_stay_below(monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiles (points along lat and lon, every time and level) on a 4-D array on an object store: from `PAIRWISE` on,
    a sharded layout whose chunks split a profile holds its runs and the bytes they merge through every chunk it
    touches (`point_bounds.PointBounds.aligned_reads`), so its requests are above what they are without (past
    `point_bounds.MOST_CELLS`) for many layouts, and every row stays, term by term, at most the model's prediction."""
    from xarray_zarrmax.advise import point_bounds

    monkeypatch.setattr(point_bounds, "MOST_CELLS_NUMPY", point_bounds.MOST_CELLS)  # (numpy held to it too)
    monkeypatch.setattr(point_bounds, "ROWS_A_CALL", 1)  # (a sample of the grid: a few layouts a chunk length)
    shape, dims = (45, 10, 31, 37), DIMS
    rng = np.random.default_rng(44)
    columns = np.unravel_index(rng.choice(shape[2] * shape[3], size=16, replace=False), shape[2:])
    mix = {"profiles": (1.0, Points(dict(zip(dims[2:], (c.tolist() for c in columns), strict=True))))}
    costs = Costs(latency_s=0.02, request_bps=8e7, request_s=8e-4, connect_s=3e-4, ratio=0.4, local=False)
    reader = Reader(local=False, coalesce_gap=4000)
    bounds, layouts = _sharded_sample(shape, mix, costs, reader, 44)
    chunks, outer, sharded, per_object = _rows(layouts)
    pairwise = bounds.terms(chunks, outer, sharded, per_object, PAIRWISE)
    with monkeypatch.context() as patch:
        patch.setattr(point_bounds, "MOST_CELLS", -1)
        patch.setattr(point_bounds, "MOST_CELLS_NUMPY", -1)
        before = bounds.terms(chunks, outer, sharded, per_object, PAIRWISE)
    request = TERMS.index("request_s")
    assert (pairwise[:, request] >= before[:, request] - 1e-15).all()
    raised = pairwise[:, request] > before[:, request] * 1.5
    assert raised.sum() >= 30, raised.sum()
    predicted = {c.layout: c for c in rank(shape, dims, 4, mix, costs=costs, reader=reader, layouts=layouts)}
    for i, layout in enumerate(layouts):
        terms = dict(predicted[layout].terms)
        assert _below(pairwise[i], terms), (layout, dict(zip(TERMS, pairwise[i], strict=True)), terms)


def test_the_second_phase_skipping_quick_costs_the_same_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scattered points on a 4-D array on an object store, under a wide spread (hundreds of ties): with batches of 64
    and `QUICK` skipped after the first whatever it leaves (`search._LEAVES_ALL` 0), the second phase takes fewer
    layouts to `QUICK` and costs the same layouts, with the same scores and ties, as with it."""
    from xarray_zarrmax.advise import search

    shape, dims = (20, 6, 15, 18), DIMS
    mix = _scattered(shape, 12, 42)
    costs = Costs(latency_s=0.02, request_bps=8e7, request_s=8e-4, connect_s=3e-4, ratio=0.4, local=False,
                  spread=(("latency_s", 0.006, 0.06), ("request_s", 3e-4, 2e-3), ("request_bps", 2e7, 3e8)))
    at_quick = [0]
    terms = SearchBounds.terms

    def counted(self, chunks, outer, sharded, per_object, level=RANGES):  # type: ignore[no-untyped-def]
        at_quick[0] += len(chunks) if level == QUICK else 0
        return terms(self, chunks, outer, sharded, per_object, level)

    monkeypatch.setattr(SearchBounds, "terms", counted)
    monkeypatch.setattr(search, "_BATCH", 64)
    runs = []
    for leaves_all in (2.0, 0.0):  # never skipped; skipped after the first batch
        monkeypatch.setattr(search, "_LEAVES_ALL", leaves_all)
        at_quick[0] = 0
        found = rank(shape, dims, 4, mix, costs=costs, reader=Reader(local=False))
        runs.append((at_quick[0], [(str(c.layout), c.score, c.tied) for c in found]))
    (quick_with, with_quick), (quick_without, without_quick) = runs
    assert without_quick == with_quick and sum(tied for _, _, tied in with_quick) > 100
    assert quick_without < quick_with, (quick_without, quick_with)
