"""Fuzzed arguments of the public entry points: the ``zarrmax`` command (`xarray_zarrmax.cli.main`),
`xarray_zarrmax.to_zarr` and ``xr.open_dataset(..., engine="zarrmax", **backend keywords)``.

Whatever they are given, a failure is one of our errors (`xarray_zarrmax.errors`) or a built-in type of the
kind engine="zarr" raises (TypeError, ValueError, KeyError, OSError...), with a message naming an argument it
was given or the store; the command exits nonzero with one line on stderr, never a traceback."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xarray_zarrmax
from xarray_zarrmax.cli import main
from xarray_zarrmax.errors import ZarrmaxError

#: What a refusal may be: ours, or the built-in types engine="zarr" and xarray raise for bad arguments.
DOCUMENTED = (ZarrmaxError, TypeError, ValueError, LookupError, OSError)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
_fresh = itertools.count()

values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 12), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "x", "v", "a", "w", "w-", "r+", "auto", "advise", "/", "../x", "cuda", "cpu", "3"]),
    st.text(max_size=4), st.lists(st.sampled_from(["x", "v", 1]), max_size=2),
    st.dictionaries(st.sampled_from(["x", "v", "anon", 1]), st.one_of(st.none(), st.integers(-1, 3),
                                                                       st.just(slice(0, 2)), st.text(max_size=2)),
                    max_size=2),
    st.just(slice(0, 2)), st.just(object()), st.just(b"bytes"),
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small v3 store: a data variable ``v`` (time, x), its index ``time`` and a 0-d ``crs``."""
    path = tmp_path_factory.mktemp("fuzz") / "d.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("v", shape=(20, 6), chunks=(5, 6), dtype="f4", dimension_names=["time", "x"])[:] = 1
    group.create_array("time", shape=(20,), chunks=(20,), dtype="i8", dimension_names=["time"])[:] = np.arange(20)
    group.create_array("crs", shape=(), dtype="i4", dimension_names=[])[...] = 0
    zarr.consolidate_metadata(path)
    return path


def names_what_was_wrong(err: BaseException, given: list[str], where: Path) -> bool:
    text = " ".join([str(err), *getattr(err, "__notes__", ())])
    return any(name in text for name in given) or str(where) in text


# -- the command ---------------------------------------------------------------------------------------------

numbers = st.sampled_from(["0", "1", "-1", "2", "1.5", "nan", "inf", "-inf", "x", "", "99", "-99", "1e9"])
spans = st.one_of(numbers, st.builds(lambda a, b: f"{a}:{b}", numbers, numbers))
dims = st.sampled_from(["time", "x", "lat", "", "time=1"])
selections = st.lists(st.builds(lambda d, s: f"{d}={s}", dims, spans), max_size=3).map(",".join)
patterns = st.sampled_from(["timeseries", "map", "region-mean", "map-mean", "full-scan", "random-batch", "box", ""])
flags = {
    "info": st.sampled_from([["--group", "v"], ["--group", "nope"], ["-o", "anon=true"], ["-o", "endpoint"],
                             ["-o", "=x"], ["--bogus"]]),
    "bench": st.one_of(st.sampled_from([["--variable", n] for n in ("v", "time", "crs", "x", "nope")]),
                       st.builds(lambda n: ["--workers", n], numbers), st.just(["-o", "a=1"])),
    "advise": st.one_of(
        st.builds(lambda p, w: ["--pattern", f"{p}:{w}"], patterns, numbers),
        st.builds(lambda p, w, s: ["--select", f"{p}:{w}:{s}"], patterns, numbers, selections),
        st.builds(lambda f, n: [f, n], st.sampled_from(["--top", "--budget-mb", "--max-object-mb", "--max-objects",
                                                         "--batch-count"]), numbers),
        st.builds(lambda s: ["--batch-window", s], selections),
        st.sampled_from([["--variable", "v"], ["--variable", "crs"], ["--variable", "time"], ["--probe", "/nope"]]),
    ),
}


@st.composite
def command_lines(draw: Any, store: Path) -> list[str]:
    command = draw(st.sampled_from(["info", "bench", "advise", "nope"]))
    url = draw(st.sampled_from([str(store), str(store / "missing.zarr"), str(store / "v"), "", "memory://x"]))
    argv = [command, url]
    for more in draw(st.lists(flags.get(command, flags["info"]), max_size=4)):
        argv += more
    if command == "advise":
        argv.append("--no-probe")  # a probe writes and times objects: seconds
    return argv


def test_fuzz_the_command(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    @FUZZ
    @given(argv=command_lines(store))
    def check(argv: list[str]) -> None:
        capsys.readouterr()
        status = main(argv)  # warnings shown: the command prints each as one line
        err = capsys.readouterr().err
        assert "Traceback" not in err, (argv, err)
        if status != 0:
            *warned, line = err.rstrip("\n").split("\n")
            assert err.endswith("\n") and line.startswith("zarrmax"), (argv, err)
            assert all(w.startswith("zarrmax: warning: ") for w in warned), (argv, err)

    check()


# -- to_zarr --------------------------------------------------------------------------------------------------

WRITE_ARGUMENTS = ["mode", "group", "encoding", "consolidated", "region", "append_dim", "zarr_format",
                   "storage_options", "compute", "write_empty_chunks", "align_chunks", "safe_chunks",
                   "chunkmanager_store_kwargs"]


def test_fuzz_to_zarr(tmp_path: Path) -> None:
    ds = xr.Dataset({"v": (("x",), np.arange(10.0))}, coords={"x": np.arange(10)})
    existing = tmp_path / "existing.zarr"
    xarray_zarrmax.to_zarr(ds, existing)

    @FUZZ
    @given(kwargs=st.dictionaries(st.sampled_from(WRITE_ARGUMENTS), values, max_size=3),
           onto_existing=st.booleans(), target_kind=st.sampled_from(["path", "path", "path", "value"]),
           target_value=values)
    def check(kwargs: dict[str, Any], onto_existing: bool, target_kind: str, target_value: Any) -> None:
        target: Any = tmp_path / f"t{next(_fresh)}.zarr"
        if onto_existing:
            xarray_zarrmax.to_zarr(ds, target)
        if target_kind == "value" and not isinstance(target_value, str):  # a str is a path: written under the cwd
            target = target_value
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                xarray_zarrmax.to_zarr(ds, target, **kwargs)
        except DOCUMENTED as err:
            assert names_what_was_wrong(err, [*kwargs, "to_zarr"], target), (kwargs, target, err)

    check()


# -- open_dataset -----------------------------------------------------------------------------------------------

OPEN_ARGUMENTS = ["group", "consolidated", "storage_options", "zarr_format", "variables",
                  "use_zarr_fill_value_as_mask", "device", "drop_variables"]


def test_fuzz_open_dataset_keywords(store: Path) -> None:
    @FUZZ
    @given(kwargs=st.dictionaries(st.sampled_from(OPEN_ARGUMENTS), values, max_size=3))
    def check(kwargs: dict[str, Any]) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                xr.open_dataset(store, engine="zarrmax", **kwargs)
        except ImportError as err:  # device="cuda" without CuPy: documented
            assert kwargs.get("device") == "cuda" and "cupy" in str(err).lower(), (kwargs, err)
        except DOCUMENTED as err:
            assert names_what_was_wrong(err, list(kwargs), store), (kwargs, err)

    check()
