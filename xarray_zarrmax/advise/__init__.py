"""The layout advisor: which (chunks, shards) make a mix of access patterns fastest on a given store.

A mix of access patterns (`patterns`) becomes the box selections each reads; candidate layouts are generated per
dimension and refined step by step (`candidates`); each is costed under every pattern by a pure arithmetic model of
our reader (`model`: requests, bytes, round trips, decode, memory), calibrated by a short probe of the store and
the decoder (`probe`), and ranked by weighted predicted time (`advisor`, whose `advise` is
``xarray_zarrmax.advise``). The model reads the reader's tuning numbers from `xarray_zarrmax.tuning`, so a
retuned reader is predicted as it reads. Nothing here writes data; `xarray_zarrmax.write` writes the layout chosen.
"""

from xarray_zarrmax.advise.advisor import AdviceReport, Candidate, Constraints, advise, advised_variables, rank
from xarray_zarrmax.advise.candidates import candidate_layouts, neighbours
from xarray_zarrmax.advise.model import Costs, Layout, Prediction, Reader
from xarray_zarrmax.advise.patterns import KNOWN_PATTERNS, Batch, parse_patterns, pattern_selections

__all__ = [
    "KNOWN_PATTERNS",
    "AdviceReport",
    "Batch",
    "Candidate",
    "Constraints",
    "Costs",
    "Layout",
    "Prediction",
    "Reader",
    "advise",
    "advised_variables",
    "candidate_layouts",
    "neighbours",
    "parse_patterns",
    "pattern_selections",
    "rank",
]
