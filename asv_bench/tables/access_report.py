"""The access-pattern table's text and plots (`asv_bench.tables.access_patterns`): every row of one run as
markdown tables (per store: wall time and bias, requests and bytes, floor and physical limits, bytes beyond
the touched chunks; the targets; the advisor's validation) and two PNGs (a heatmap of seconds per layout and
operation, predicted against measured).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from asv_bench.shared.access import ENGINES, EXACT, MB, MIXES, OPS


def _rows(result: Mapping[str, Any], store: str, **match: Any) -> list[dict[str, Any]]:
    return [r for r in result["rows"] if r["store"] == store and all(r[k] == v for k, v in match.items())]


def bias(result: Mapping[str, Any], store: str, layout: str, engine: str) -> float:
    t = [r[f"{engine}_s"] for r in _rows(result, store, layout=layout) if f"{engine}_s" in r]
    return max(t) / min(t) if len(t) == len(OPS) else float("nan")


def mix_scores(result: Mapping[str, Any], store: str, weights: Mapping[str, float], key: str) -> dict[str, float]:
    """Per layout, sum of weight x ``key`` (zarrmax_s or predicted_s) over the operations."""
    out: dict[str, float] = {}
    for r in _rows(result, store):
        if key in r:
            out[r["layout"]] = out.get(r["layout"], 0.0) + weights[r["op"]] * r[key]
    return out


def _curve_text(curve: Sequence[Sequence[float]]) -> str:
    """The probed decode rate per chunk size, as ``(4 kB: 430, 16 kB: 710, ...)`` MB/s."""
    if not curve:
        return ""
    return " (by chunk size: " + ", ".join(f"{n / 1e3:.0f} kB {r / 1e6:.0f}" for n, r in curve) + ")"


def validation(result: Mapping[str, Any]) -> dict[str, Any]:
    stores = sorted({r["store"] for r in result["rows"]})
    kinds = {lay["key"]: lay["kind"] for lay in result["layouts"]}
    rho = {(s, op): rank_correlation([r["predicted_s"] for r in _rows(result, s, op=op)],
                                     [r["zarrmax_s"] for r in _rows(result, s, op=op)])
           for s in stores for op in OPS}
    mixes = []
    for s in stores:
        for mix, weights in MIXES.items():
            measured = mix_scores(result, s, weights, "zarrmax_s")
            pred = mix_scores(result, s, weights, "predicted_s")
            chosen = [k for k in measured if kinds[k] != "advised"]
            best = min(chosen, key=measured.__getitem__)
            pick = min(chosen, key=pred.__getitem__)
            searched = result["advised"].get(s, {}).get(mix)
            mixes.append({"store": s, "mix": mix, "best": best, "best_s": measured[best], "pick": pick,
                          "pick_ratio": measured[pick] / measured[best], "searched": searched,
                          "searched_ratio": measured[searched] / measured[best] if searched else float("nan"),
                          "searched_predicted_s": pred.get(searched, float("nan")) if searched else float("nan")})
    return {"rho": rho, "mixes": mixes}


def physical_ratio(row: Mapping[str, Any]) -> float:
    """zarrmax's time against its physical limits: the reader's requests replayed, then the decode alone."""
    return row["zarrmax_s"] / (row["replay_s"] + row["decode_s"])


def overlap_ratio(row: Mapping[str, Any]) -> float:
    """zarrmax's time against the slower of its two limits: what a reader overlapping them perfectly takes."""
    return row["zarrmax_s"] / max(row["replay_s"], row["decode_s"])


def _median_of(rows: Sequence[Mapping[str, Any]], num: str, den: str) -> float:
    return statistics.median(r[num] / r[den] for r in rows) if rows else math.nan


def _exact_text() -> str:
    return ", ".join(f"{k}={v:g}" for k, v in EXACT.items())


def report(result: Mapping[str, Any]) -> str:
    labels = {lay["key"]: lay["label"] for lay in result["layouts"]}
    kinds = {lay["key"]: lay["kind"] for lay in result["layouts"]}
    stores = sorted({r["store"] for r in result["rows"]})
    out = []
    shape = "x".join(map(str, result["shape"]))
    out.append(f"GEOS-FP-like float32 field {shape} (time x lat x lon, {result['nbytes'] / MB:.0f} MB), zstd level "
               f"3; MinIO behind toxiproxy +{result['latency_ms']} ms and local disk; median of {result['repeat']} "
               f"first accesses per cell (fresh open, not timed; cold index cache), chunks=None. Run took "
               f"{result['wall_s'] / 60:.1f} min (writing {result['write_s']:.0f} s).")
    out.append("")
    out.append("| layout | kind | stored MB | objects stored |")
    out.append("|---|---|---|---|")
    for lay in result["layouts"]:
        objects = lay["chunks_count"] if not lay["shards"] else math.prod(
            -(-n // s) for n, s in zip(result["shape"], lay["shards"], strict=True))
        out.append(f"| {lay['label']} | {lay['kind']} | {lay['stored_bytes'] / MB:.1f} | {objects} |")
    for s in stores:
        fl = result["floors"][s]
        out.append("")
        out.append(f"### {s}: latency {fl['latency_s'] * 1e3:.3g} ms, raw-GET ceiling "
                   f"{fl['ceiling_bps'] / 1e9:.2f} GB/s")
        out.append("")
        out.append("Wall time of the operation (s, median), zarr / zarrmax, and seed 001's performance bias "
                   "(slowest / fastest of the four operations):")
        out.append("")
        out.append("| layout | " + " | ".join(OPS) + " | bias zarr | bias zarrmax |")
        out.append("|---" * (len(OPS) + 3) + "|")
        for key in labels:
            rs = {r["op"]: r for r in _rows(result, s, layout=key)}
            cells = [f"{rs[o]['zarr_s']:.3f} / {rs[o]['zarrmax_s']:.3f}" if "zarr_s" in rs[o] else
                     f"- / {rs[o]['zarrmax_s']:.3f}" for o in OPS]
            out.append(f"| {labels[key]} | " + " | ".join(cells) + f" | {bias(result, s, key, 'zarr'):.1f} | "
                       f"{bias(result, s, key, 'zarrmax'):.1f} |")
        out.append("")
        out.append("Requests and MB fetched by the operation (zarr / zarrmax), and tracemalloc peak MB "
                   "(zarr / zarrmax):")
        out.append("")
        out.append("| layout | " + " | ".join(f"{o} requests | {o} MB | {o} peak MB" for o in OPS) + " |")
        out.append("|---" * (3 * len(OPS) + 1) + "|")
        for key in labels:
            rs = {r["op"]: r for r in _rows(result, s, layout=key)}
            cells = []
            for o in OPS:
                r = rs[o]
                z = "zarr_requests" in r
                cells += [f"{r['zarr_requests'] if z else '-'} / {r['zarrmax_requests']}",
                          f"{r['zarr_bytes'] / MB if z else float('nan'):.2f} / {r['zarrmax_bytes'] / MB:.2f}",
                          f"{r['zarr_peak_bytes'] / MB if z else float('nan'):.1f} / "
                          f"{r['zarrmax_peak_bytes'] / MB:.1f}"]
            out.append(f"| {labels[key]} | " + " | ".join(cells) + " |")
        out.append("")
        out.append("Floor = round trips x latency + needed bytes / raw-GET ceiling (needed: the touched chunks' "
                   "stored bytes plus each touched shard's index); measured / floor per engine; predicted: the "
                   "advisor's model, calibrated by its probes. The floor has no CPU term: on local disk, where "
                   "the latency is microseconds, it is a lower bound no Python reader approaches. \"reader round "
                   "trips\": the model's count for zarrmax, whose objects in flight are also bounded by "
                   "inflight_bytes (each fetch as it is sent: a whole object at its decoded size, an index or a "
                   "shard's ranges at their size). The physical limits, measured in the same rounds: \"replay\", "
                   "the reader's own requests (checked equal to its counted ones) sent raw with nothing else; "
                   "\"decode\", our decoder alone on the touched chunks, already in memory; zarrmax against "
                   "their sum (read then decode, both stages on the same cores) and against the slower of the two "
                   "(the stages overlapped perfectly):")
        out.append("")
        out.append("| layout | op | round trips | reader round trips | needed MB | floor s | replay s | decode s | "
                   "zarrmax s | zarrmax / floor | zarrmax / (replay + decode) | zarrmax / max(replay, decode) | "
                   "zarr / floor | predicted s | predicted / zarrmax |")
        out.append("|---" * 15 + "|")
        for r in _rows(result, s):
            z = f"{r['zarr_s'] / r['floor_s']:.1f}x" if "zarr_s" in r else "-"
            out.append(f"| {labels[r['layout']]} | {r['op']} | {r['floor_round_trips']} | "
                       f"{r['predicted_round_trips']} | "
                       f"{r['needed_bytes'] / MB:.3f} | {r['floor_s']:.4f} | {r['replay_s']:.4f} | "
                       f"{r['decode_s']:.4f} | {r['zarrmax_s']:.4f} | "
                       f"{r['zarrmax_s'] / r['floor_s']:.2f}x | {physical_ratio(r):.2f}x | {overlap_ratio(r):.2f}x | "
                       f"{z} | "
                       f"{r['predicted_s']:.4f} | {r['predicted_s'] / r['zarrmax_s']:.2f} |")
        out.append("")
        out.append("Sharded layouts, zarrmax: bytes fetched beyond the touched chunks and one index per touched "
                   "shard, at the default settings (whole-shard GETs: the reader's choice when it needs >= "
                   "full_shard_fraction of a shard's chunks, to save the index's round trip; gaps: ranges merged "
                   f"within coalesce_gap, to save requests) and with {_exact_text()}:")
        out.append("")
        out.append("| layout | op | shards | whole-shard GETs | touched MB | index MB | fetched MB | beyond MB | "
                   "requests | s | exact: beyond MB | requests | s |")
        out.append("|---" * 13 + "|")
        for r in _rows(result, s):
            if not r["sharded"]:
                continue
            beyond = r["zarrmax_bytes"] - r["needed_bytes"]
            out.append(f"| {labels[r['layout']]} | {r['op']} | {r['objects']} | {r['whole_shards']} | "
                       f"{r['touched_bytes'] / MB:.3f} | {r['index_bytes'] / MB:.3f} | "
                       f"{r['zarrmax_bytes'] / MB:.3f} | {beyond / MB:.3f} | {r['zarrmax_requests']} | "
                       f"{r['zarrmax_s']:.4f} | {(r['zarrmax_exact_bytes'] - r['needed_bytes']) / MB:.3f} | "
                       f"{r['zarrmax_exact_requests']} | {r['zarrmax_exact_s']:.4f} |")
    out.append("")
    out.append("### Targets")
    out.append("")
    out.append("| target | store | result | detail |")
    out.append("|---|---|---|---|")
    for s in stores:
        sharded = [r for r in _rows(result, s) if r["sharded"]]
        over = [r for r in sharded if r["zarrmax_bytes"] > r["needed_bytes"]]
        over_exact = [r for r in sharded if r["zarrmax_exact_bytes"] > r["needed_bytes"]]
        extra = sum(r["zarrmax_bytes"] - r["needed_bytes"] for r in over)
        cost = statistics.median(r["zarrmax_exact_s"] / r["zarrmax_s"] for r in sharded) if sharded else math.nan
        more = (sum(r["zarrmax_exact_requests"] for r in sharded) / max(1, sum(r["zarrmax_requests"] for r in sharded)))
        out.append(f"| sharded: no byte beyond touched chunks + one index per shard | {s} | "
                   f"{'met' if not over_exact else 'missed'} with {_exact_text()} "
                   f"({len(sharded) - len(over_exact)}/{len(sharded)} operations); "
                   f"{'met' if not over else 'missed'} at the defaults ({len(sharded) - len(over)}/{len(sharded)}) | "
                   f"the defaults fetch {extra / MB:.2f} MB more in all (whole-shard GETs and ranges merged across "
                   f"gaps); the exact settings send {more:.1f}x the requests (all operations' requests summed) "
                   f"and take {cost:.2f}x the defaults' time (median of the per-operation ratios) |")
        rs = _rows(result, s)
        within = [r for r in rs if r["zarrmax_s"] <= 1.5 * r["floor_s"]]
        worst = sorted(rs, key=lambda r: -r["zarrmax_s"] / r["floor_s"])[:3]
        outside = [r for r in rs if r["zarrmax_s"] > 1.5 * r["floor_s"]]
        limited = [r for r in outside if physical_ratio(r) <= 1.5]
        rest = statistics.median([r["zarrmax_s"] - r["replay_s"] - r["decode_s"] for r in outside
                                  if physical_ratio(r) > 1.5] or [math.nan])
        out.append(f"| every operation within 1.5x of its floor (zarrmax) | {s} | "
                   f"{'met' if len(within) == len(rs) else 'missed'} | {len(within)}/{len(rs)}; worst: "
                   + ", ".join(f"{r['layout'].removesuffix('.zarr')} {r['op']} {r['zarrmax_s'] / r['floor_s']:.1f}x"
                               for r in worst)
                   + f". Of the {len(outside)} others, {len(limited)} are within 1.5x of their physical limits "
                   "measured in this run (replay + decode; median "
                   f"{statistics.median(physical_ratio(r) for r in outside) if outside else math.nan:.2f}x), "
                   f"{len([r for r in outside if overlap_ratio(r) <= 1.5])} within 1.5x of max(replay, decode) "
                   f"(median {statistics.median(overlap_ratio(r) for r in outside) if outside else math.nan:.2f}x): "
                   f"there the replay alone is {_median_of(outside, 'replay_s', 'floor_s'):.1f}x the floor and the "
                   f"decode alone {_median_of(outside, 'decode_s', 'floor_s'):.1f}x (medians)"
                   + (f"; the {len(outside) - len(limited)} beyond 1.5x spend a median {rest * 1e3:.1f} ms beyond "
                      "replay + decode (the reader's own work per object and chunk, xarray's indexing and mean)"
                      if len(outside) > len(limited) else "") + " |")
        biases = {lay["key"]: bias(result, s, lay["key"], "zarrmax") for lay in result["layouts"]
                  if lay["shards"]}
        ours = {k: v for k, v in biases.items() if kinds[k] == "sharded"}
        best = min(biases, key=biases.__getitem__) if biases else None
        best_ours = min(ours, key=ours.__getitem__) if ours else None
        out.append(f"| a sharded layout with bias <= 2 (zarrmax) | {s} | "
                   f"{'met' if best and biases[best] <= 2 else 'missed'} | best: "
                   f"{labels[best] if best else '-'} {biases.get(best, float('nan')):.2f}; of the five chosen "
                   f"beforehand: {labels[best_ours] if best_ours else '-'} {ours.get(best_ours, float('nan')):.2f} "
                   "(seed 001's best: 4) |")
    v = validation(result)
    out.append("")
    out.append("### Validation: the advisor's model against the measured times (zarrmax)")
    out.append("")
    for s in stores:
        c = result["calibration"][s]["costs"]
        out.append(f"- {s}: probed latency {c['latency_s'] * 1e3:.3g} ms, {c['request_bps'] / 1e6:.0f} MB/s per "
                   f"request, {c['aggregate_bps'] / 1e6:.0f} MB/s in all; zstd {c['decode_bps'] / 1e6:.0f} MB/s "
                   f"per thread{_curve_text(c.get('decode_curve', ()))}, ratio {c['ratio']:.2f}; "
                   f"work {c['request_s'] * 1e6:.0f} us per request, "
                   f"{c.get('connect_s', 0.0) * 1e6:.0f} us per connection opened, "
                   f"{c.get('index_s', 0.0) * 1e6:.0f} us per shard index and "
                   f"{c.get('index_entry_s', 0.0) * 1e9:.0f} ns per index entry, {c['chunk_s'] * 1e6:.0f} us per chunk")
    out.append("")
    out.append("Spearman rank correlation of predicted and measured seconds across layouts (target >= 0.9):")
    out.append("")
    out.append("| op | " + " | ".join(stores) + " |")
    out.append("|---" * (len(stores) + 1) + "|")
    for op in OPS:
        out.append(f"| {op} | " + " | ".join(
            f"{v['rho'][(s, op)]:.2f} ({'met' if v['rho'][(s, op)] >= 0.9 else 'missed'})" for s in stores) + " |")
    out.append("")
    out.append("Pattern mixes (weights: " + "; ".join(
        f"{m} " + ", ".join(f"{k} {w:g}" for k, w in ws.items()) for m, ws in MIXES.items())
        + "). Measured score = sum of weight x measured seconds; ratios to the best measured layout of the "
        "table above (target <= 1.25x):")
    out.append("")
    out.append("| store | mix | best measured | its score s | advisor's pick among those | ratio | advisor's own "
               "search: top layout | ratio |")
    out.append("|---" * 8 + "|")
    for m in v["mixes"]:
        ok = "met" if m["pick_ratio"] <= 1.25 else "missed"
        sr = m["searched_ratio"]
        searched = labels.get(m["searched"], "-") if m["searched"] else "-"
        out.append(f"| {m['store']} | {m['mix']} | {labels[m['best']]} | {m['best_s']:.3f} | {labels[m['pick']]} | "
                   f"{m['pick_ratio']:.2f}x ({ok}) | {searched} | "
                   + (f"{sr:.2f}x ({'met' if sr <= 1.25 else 'missed'})" if m["searched"] else "-") + " |")
    return "\n".join(out)


def plot(result: Mapping[str, Any], prefix: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    stores = sorted({r["store"] for r in result["rows"]})
    lays = [lay for lay in result["layouts"] if lay["kind"] != "advised"]
    values = [r[f"{e}_s"] for r in result["rows"] for e in ENGINES if f"{e}_s" in r]
    norm = LogNorm(vmin=min(values), vmax=max(values))
    fig, axes = plt.subplots(len(stores), 2, figsize=(13, 1.2 + 0.55 * len(lays) * len(stores)), squeeze=False)
    for i, s in enumerate(stores):
        for j, engine in enumerate(ENGINES):
            ax = axes[i, j]
            grid = np.array([[next(r[f"{engine}_s"] for r in _rows(result, s, layout=lay["key"], op=op))
                              for op in OPS] for lay in lays])
            im = ax.imshow(grid, norm=norm, cmap="viridis_r", aspect="auto")
            for (a, b), val in np.ndenumerate(grid):
                ax.text(b, a, f"{val:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if norm(val) > 0.5 else "black")
            ax.set_xticks(range(len(OPS)), OPS, fontsize=8)
            ax.set_yticks(range(len(lays)), [lay["label"] for lay in lays] if j == 0 else [], fontsize=7)
            ax.set_title(f'{s}, engine="{engine}": seconds', fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.6, label="seconds (log)")
    fig.savefig(f"{prefix}-heatmap.png", dpi=110, bbox_inches="tight")
    plt.close(fig)

    fig, axes = plt.subplots(1, len(stores), figsize=(5.5 * len(stores), 5), squeeze=False)
    markers = dict(zip(OPS, "osD^", strict=True))
    for ax, s in zip(axes[0], stores, strict=True):
        rs = _rows(result, s)
        for op in OPS:
            pts = [(r["predicted_s"], r["zarrmax_s"]) for r in rs if r["op"] == op]
            ax.scatter(*zip(*pts, strict=True), marker=markers[op], label=op, alpha=0.8)
        lo = min(min(r["predicted_s"], r["zarrmax_s"]) for r in rs) / 1.5
        hi = max(max(r["predicted_s"], r["zarrmax_s"]) for r in rs) * 1.5
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="predicted s (advisor)",
               ylabel="measured s (zarrmax)", title=f"{s}: one marker per layout and operation")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{prefix}-predicted.png", dpi=110)
    plt.close(fig)



def rank_correlation(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the ranks (ties share their mean rank)."""
    def ranks(x: Sequence[float]) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        order = np.argsort(x, kind="mergesort")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):
            same = x == v
            r[same] = r[same].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if len(ra) < 2 or ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])

