"""The history page's plot (perf_report): each benchmark of a history over releases, per engine."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asv_bench.shared import release_history as rh


def draw(h: Any, path: Path, short: Callable[[str], str]) -> None:
    """Small multiples of perf_report's ``History`` ``h``: one panel per benchmark and combination of its other
    parameters, a line per engine over the releases, interquartile ranges as bars, regressions ringed in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(m, g) for m in h.methods.values() for g in m.groups()]
    if not panels:
        return
    ncols = 4
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.9 * nrows), squeeze=False)
    names = [r.name for r in h.releases]
    flagged = {(r.method, r.others, r.engine, r.after.commit) for r in h.regressions}
    for ax, (method, group) in zip(axes.flat, panels, strict=False):
        scale, unit = (1e3, "ms") if method.kind == "time" else (1.0, method.unit or method.kind)
        xs = list(range(len(h.releases)))
        for engine in method.engines():
            series = method.series.get((group, engine), {})
            points = [series.get(r.commit) for r in h.releases]
            ys = [p.value * scale if p is not None and p.value is not None and rh.measured(p) else float("nan")
                  for p in points]
            line, = ax.plot(xs, ys, marker="o", markersize=3, label=engine)
            for x, p in enumerate(points):
                if p is not None and rh.measured(p) and p.q25 is not None and p.q75 is not None:
                    ax.vlines(x, p.q25 * scale, p.q75 * scale, color=line.get_color(), linewidth=1)
                elif p is not None and p.value is None:  # failed or not runnable
                    ax.plot(x, 0, "x", color=line.get_color(), markersize=5, clip_on=False)
                if (method.name, group, engine, h.releases[x].commit) in flagged:
                    ax.plot(x, ys[x], "o", markersize=9, markerfacecolor="none", markeredgecolor="red")
        ax.set_xticks(xs, names)
        ax.set_ylim(bottom=0)
        ax.set_ylabel(unit, fontsize=7)
        ax.tick_params(labelsize=6)
        params = ", ".join(f"{k}={short(v).replace(chr(10), ' ') if k == 'layout' else v}" for k, v in group)
        title = "\n".join([method.name.split(".", 1)[-1], *textwrap.wrap(params, 70)])
        ax.set_title(title, fontsize=6.5)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("Benchmarks over releases. Lines: engines; bars: interquartile range of asv's samples; x at 0: not "
                 "runnable at that release; red ring: a regression beyond noise", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
