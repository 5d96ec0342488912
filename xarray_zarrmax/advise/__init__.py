"""The layout advisor: which (chunks, shards) make a mix of access patterns fastest on a given store.

A mix of access patterns (`patterns`) becomes the selections each reads; candidate layouts form a grid
(`candidates`) searched best first under lower bounds (`bounds`, `search`); each is costed under every pattern by
a pure arithmetic model of our reader (`counting`, `model`: requests, bytes, round trips, decode, memory),
calibrated by a short probe of the store and the decoder (`probe`), and ranked by weighted predicted time
(`advisor`, whose `advise` is ``xarray_zarrmax.advise``; `report` holds what it answers). The model reads the
reader's tuning numbers from `xarray_zarrmax.tuning`, so a retuned reader is predicted as it reads. Nothing here
writes data; `xarray_zarrmax.write` writes the layout chosen.
"""

from xarray_zarrmax.advise.advisor import advise, advised_variables, calibrate, rank, stored_dtype
from xarray_zarrmax.advise.candidates import candidate_layouts, neighbours
from xarray_zarrmax.advise.model import Costs, Layout, Prediction, Reader
from xarray_zarrmax.advise.patterns import KNOWN_PATTERNS, Batch, Points, parse_patterns, pattern_selections
from xarray_zarrmax.advise.report import AdviceReport, Candidate, Constraints

__all__ = [
    "KNOWN_PATTERNS",
    "AdviceReport",
    "Batch",
    "Candidate",
    "Constraints",
    "Costs",
    "Layout",
    "Points",
    "Prediction",
    "Reader",
    "advise",
    "advised_variables",
    "calibrate",
    "candidate_layouts",
    "neighbours",
    "parse_patterns",
    "pattern_selections",
    "rank",
    "stored_dtype",
]
