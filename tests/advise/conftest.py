"""Fixtures of the advisor's tests."""

from __future__ import annotations

import pytest

from xarray_zarrmax.advise import kernels


@pytest.fixture(params=["compiled", "numpy"])
def bound_kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test once with the search's compiled kernels (`advise.kernels`; skipped where they were not built, but
    never in CI: tests/advise/test_advise_kernels.py) and once with their numpy forms."""
    if request.param == "numpy":
        monkeypatch.setattr(kernels, "compiled", None)
    elif kernels.compiled is None:
        pytest.skip("xarray_zarrmax.advise._kernels not built here (no C compiler at install)")
    return str(request.param)
