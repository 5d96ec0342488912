"""The zarrmax command and progress bars."""

from __future__ import annotations

import io
import warnings

import dask
import numpy as np
import pytest
import xarray as xr
import zarr
from dask.diagnostics import ProgressBar

from xarray_zarrmax import set_config
from xarray_zarrmax.cli import main


def write(path) -> str:
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array("t", shape=(40, 6), chunks=(5, 6), shards=(10, 6), dtype="f4",
                             dimension_names=["time", "x"])
    arr[:] = np.arange(240, dtype="f4").reshape(40, 6)
    group.create_array("time", shape=(40,), chunks=(40,), dtype="i8", dimension_names=["time"])[:] = np.arange(40)
    names = group.create_array("names", shape=(2,), chunks=(2,), dtype=str, dimension_names=["y"])
    names[:] = ["a", "b"]
    return str(path)


def test_info_lists_layouts_and_paths(tmp_path, capsys):
    path = write(tmp_path / "d.zarr")
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "GET" in out and "LIST" in out
    assert "t: ('time', 'x') float32 chunks (5, 6) in shards (10, 6); fast path" in out
    assert "names:" in out and "zarr-python (data type" in out  # strings fall back, and it says why
    assert "time: ('time',)" in out and "loaded at open" in out


def test_bench_reads_everything_with_a_progress_bar(tmp_path, capsys):
    path = write(tmp_path / "d.zarr")
    assert main(["bench", path, "--variable", "t", "--workers", "2"]) == 0
    captured = capsys.readouterr()
    # chunks={}: the 4 small stored chunks are one task (config task_bytes), still 4 GETs
    assert "reading 1 variable(s)" in captured.out and "1 task(s) (grouped up to 128 MiB a task)" in captured.out
    assert "GB/s" in captured.out and "4 GET requests" in captured.out
    assert "100% Completed" in captured.err
    with set_config(task_bytes=0):
        assert main(["bench", path, "--variable", "t", "--workers", "2"]) == 0
    assert "4 task(s) (one per stored object)" in capsys.readouterr().out


def test_errors_are_one_line_and_nonzero(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing.zarr")]) == 1
    assert "FileNotFoundError" in capsys.readouterr().err
    assert main(["bench", write(tmp_path / "d.zarr"), "--variable", "nope"]) == 2
    assert "--variable 'nope' is not in" in capsys.readouterr().err


def test_dask_progress_bar_moves_shard_by_shard(tmp_path):
    path = write(tmp_path / "d.zarr")
    ds = xr.open_dataset(path, engine="zarrmax", chunks={})
    out = io.StringIO()
    with dask.config.set(scheduler="threads"), ProgressBar(out=out, dt=0.001):
        values = ds["t"].values
    assert "100% Completed" in out.getvalue()
    np.testing.assert_array_equal(values, np.arange(240, dtype="f4").reshape(40, 6))


# -- hostile input: one line on stderr, naming what was wrong, and a nonzero exit (issue 46) --------------------


def write_with_grid_mapping(path) -> str:
    """`write`'s store plus a 0-d data variable, the CF grid mapping ``crs``, with consolidated metadata."""
    write(path)
    group = zarr.open_group(str(path), mode="a", zarr_format=3)
    group.create_array("crs", shape=(), dtype="i4", dimension_names=[])[...] = 0
    zarr.consolidate_metadata(str(path))
    return str(path)


def one_line_error(capsys) -> str:
    """The error the command wrote on stderr, checked to be a single line without a traceback (warnings before
    it are one line each too)."""
    err = capsys.readouterr().err
    assert err.endswith("\n") and "Traceback" not in err, err
    *warned, line = err.rstrip("\n").split("\n")
    assert all(w.startswith("zarrmax: warning: ") for w in warned), err
    return line


def test_warnings_are_one_line_each(tmp_path, capsys):
    path = write(tmp_path / "d.zarr")  # no consolidated metadata: engine="zarr"'s RuntimeWarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(advise_argv(path, "--select", "a:1:time=99")) == 2
    warned, error = capsys.readouterr().err.rstrip("\n").split("\n")
    assert warned.startswith("zarrmax: warning: RuntimeWarning: Failed to open Zarr store with consolidated metadata, "
                             "but successfully read with non-consolidated metadata. This is typically much slower "
                             "for opening a dataset. To silence this warning, consider: 1. Consolidating metadata")
    assert error.startswith("zarrmax advise: --select 'a:1:time=99': index 99 is outside dimension 'time'")


def test_bench_skips_variables_read_whole_at_open_and_says_so(tmp_path, capsys):
    path = write_with_grid_mapping(tmp_path / "d.zarr")
    assert main(["bench", path, "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "skipped ['crs']: 0-d, read whole at open" in out
    assert "reading 2 variable(s)" in out and "GB/s" in out  # t and names


@pytest.mark.parametrize(("variable", "expected"), [
    ("time", "zarrmax bench: --variable 'time' is an index coordinate, read whole at open; expected a variable "
             "read lazily, one of ['names', 't']"),
    ("crs", "zarrmax bench: --variable 'crs' is 0-d, read whole at open; expected a variable read lazily, one of "
            "['names', 't']"),
])
def test_bench_refuses_a_variable_read_whole_at_open(tmp_path, capsys, variable, expected):
    path = write_with_grid_mapping(tmp_path / "d.zarr")
    assert main(["bench", path, "--variable", variable]) == 2
    assert one_line_error(capsys) == expected


def test_bench_with_nothing_left_to_read(tmp_path, capsys):
    group = zarr.open_group(str(tmp_path / "d.zarr"), mode="w", zarr_format=3)
    group.create_array("crs", shape=(), dtype="i4", dimension_names=[])[...] = 0
    assert main(["bench", str(tmp_path / "d.zarr")]) == 1
    assert one_line_error(capsys) == (f"zarrmax bench: nothing to read in {tmp_path / 'd.zarr'}: its data "
                                      "variables ['crs'] were read whole at open (0-d)")


@pytest.mark.parametrize(("argv", "expected"), [
    (["--variable", "nope"], "zarrmax bench: --variable 'nope' is not in {path}; expected one of ['t', 'names']"),
    (["--variable", "t", "--variable", "t"], "zarrmax bench: --variable 't' given twice; expected each variable once"),
    (["--workers", "0"], "zarrmax bench: argument --workers: expected a whole number >= 1. Got '0'."),
    (["--workers", "two"], "zarrmax bench: argument --workers: expected a whole number >= 1. Got 'two'."),
])
def test_bench_arguments(tmp_path, capsys, argv, expected):
    path = write(tmp_path / "d.zarr")
    assert main(["bench", path, *argv]) == 2
    assert one_line_error(capsys) == expected.format(path=path)


@pytest.mark.parametrize(("option", "expected"), [
    (["-o", "endpoint"], "zarrmax info: -o 'endpoint': expected KEY=VALUE, e.g. -o endpoint=http://127.0.0.1:9000"),
    (["-o", "=S3CRET"], "zarrmax info: -o with an empty KEY: expected KEY=VALUE, e.g. -o endpoint=http://127.0.0.1:9000"),
    (["-o", "region=a", "-o", "region=b"], "zarrmax info: -o 'region' given twice; expected each storage option once"),
])
def test_storage_options_are_checked_without_showing_values(tmp_path, capsys, option, expected):
    assert main(["info", write(tmp_path / "d.zarr"), *option]) == 2
    assert one_line_error(capsys) == expected


def test_a_storage_option_with_a_local_path_is_one_line(tmp_path, capsys):
    assert main(["info", write(tmp_path / "d.zarr"), "-o", "anon=true"]) == 1
    assert one_line_error(capsys) == ("zarrmax: TypeError: 'storage_options' was provided but unused: they go with "
                                      "s3:// and fsspec URLs only. Got them with a local path.")


def test_an_index_coordinate_too_large_for_memory_is_one_line(tmp_path, capsys):
    group = zarr.open_group(str(tmp_path / "huge.zarr"), mode="w", zarr_format=3)
    group.create_array("time", shape=(2**40,), chunks=(2**20,), dtype="i8", dimension_names=["time"])
    assert main(["info", str(tmp_path / "huge.zarr")]) == 1
    err = one_line_error(capsys)
    assert err.startswith("zarrmax: MemoryError: Unable to allocate 8.00 TiB")
    assert err.endswith(f"(while reading index coordinate 'time' of file://{tmp_path / 'huge.zarr'} at open: "
                        "1099511627776 values of int64, 8.80 TB; xarray builds its index from them)")


def test_usage_errors_are_one_line(capsys):
    assert main(["nope"]) == 2
    assert one_line_error(capsys) == ("zarrmax: argument command: invalid choice: 'nope' "
                                      "(choose from 'info', 'bench', 'advise')")
    assert main(["info"]) == 2
    assert one_line_error(capsys) == "zarrmax info: the following arguments are required: url"


def advise_argv(path: str, *more: str) -> list[str]:
    return ["advise", path, "--no-probe", *more]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--pattern", "map:1", "--top", "-1"], "zarrmax advise: argument --top: expected a whole number >= 0. Got '-1'."),
    (["--pattern", "map:1", "--budget-mb", "nan"],
     "zarrmax advise: argument --budget-mb: expected a positive number of MB. Got 'nan'."),
    (["--pattern", "map:1", "--max-object-mb", "-2"],
     "zarrmax advise: argument --max-object-mb: expected a positive number of MB. Got '-2'."),
    (["--pattern", "map:1", "--max-objects", "0"],
     "zarrmax advise: argument --max-objects: expected a whole number >= 1. Got '0'."),
    (["--pattern", "map:1", "--batch-count", "0"],
     "zarrmax advise: argument --batch-count: expected a whole number >= 1. Got '0'."),
    (["--pattern", "map:1", "--probe", "/tmp/p"],
     "zarrmax advise: argument --probe: not allowed with argument --no-probe"),
    (["--pattern", "map:1", "--pattern", "map:2"],
     "zarrmax advise: pattern 'map' given twice (--pattern 'map:1', --pattern 'map:2'); expected each pattern once"),
    (["--pattern", "map:1", "--select", "map:1:time=0:2"],
     "zarrmax advise: pattern 'map' given twice (--pattern 'map:1', --select 'map:1:time=0:2'); expected each "
     "pattern once"),
    (["--select", "a:1:time=0", "--select", "a:2:x=0"],
     "zarrmax advise: pattern 'a' given twice (--select 'a:1:time=0', --select 'a:2:x=0'); expected each pattern once"),
    ([], "zarrmax advise: expected at least one --pattern NAME:WEIGHT or --select NAME:WEIGHT:DIM=START:STOP,..., "
         "e.g. --pattern timeseries:0.5 --pattern map:0.5"),
    (["--pattern", "map"], "zarrmax advise: --pattern 'map': expected NAME:WEIGHT with a number WEIGHT, e.g. "
                           "timeseries:0.5"),
    (["--pattern", "map:1:time=0"], "zarrmax advise: --pattern 'map:1:time=0': expected NAME:WEIGHT with a number "
                                    "WEIGHT, e.g. timeseries:0.5"),
    (["--pattern", "map:-1"], "zarrmax advise: --pattern 'map:-1': expected a positive WEIGHT. Got '-1'."),
    (["--select", "a:inf:time=0"], "zarrmax advise: --select 'a:inf:time=0': expected a positive WEIGHT. Got 'inf'."),
    (["--pattern", "maps:1"], "zarrmax advise: --pattern 'maps:1': unknown pattern 'maps'; expected one of "
                              "timeseries, map, region-mean, map-mean, full-scan, random-batch, or --select "
                              "NAME:WEIGHT:DIM=START:STOP,... for a box of your own"),
    (["--select", "a:1:time=1.5"], "zarrmax advise: --select 'a:1:time=1.5': expected DIM=INDEX or DIM=START:STOP in "
                                   "whole numbers for dimension 'time'. Got '1.5'."),
    (["--select", "a:1:time=1,time=2"], "zarrmax advise: --select 'a:1:time=1,time=2': dimension 'time' given twice"),
    (["--select", "a:1:time"],
     "zarrmax advise: --select 'a:1:time': expected DIM=INDEX or DIM=START:STOP. Got 'time'."),
    (["--pattern", "random-batch:1", "--batch-window", "time=0"],
     "zarrmax advise: --batch-window 'time=0': expected a window size >= 1 for dimension 'time'. Got 0."),
    (["--pattern", "random-batch:1", "--batch-window", "time=2:4"],
     "zarrmax advise: --batch-window 'time=2:4': expected DIM=SIZE for dimension 'time'. Got '2:4'."),
])
def test_advise_refuses_bad_arguments_before_opening_the_store(tmp_path, capsys, argv, expected):
    assert main(advise_argv(str(tmp_path / "never-opened.zarr"), *argv)) == 2
    assert one_line_error(capsys) == expected


@pytest.mark.parametrize(("selection", "expected"), [
    ("time=99", "index 99 is outside dimension 'time' of 't' (length 40); expected an index from -40 to 39"),
    ("time=-99", "index -99 is outside dimension 'time' of 't' (length 40); expected an index from -40 to 39"),
    ("time=40", "index 40 is outside dimension 'time' of 't' (length 40); expected an index from -40 to 39"),
    ("time=5:5", "slice 5:5 of dimension 'time' of 't' (length 40) selects nothing; expected START < STOP, both "
                 "from -40 to 40 (either may be left out)"),
    ("time=10:2", "slice 10:2 of dimension 'time' of 't' (length 40) selects nothing; expected START < STOP, both "
                  "from -40 to 40 (either may be left out)"),
    ("time=0:99", "slice 0:99 reaches outside dimension 'time' of 't' (length 40); expected START < STOP, both from "
                  "-40 to 40 (either may be left out)"),
    ("time=-50:", "slice -50: reaches outside dimension 'time' of 't' (length 40); expected START < STOP, both from "
                  "-40 to 40 (either may be left out)"),
    ("lat=0", "dimension 'lat' is not one of 't''s ('time', 'x')"),
])
def test_advise_refuses_selections_outside_the_variable(tmp_path, capsys, selection, expected):
    path = write(tmp_path / "d.zarr")
    assert main(advise_argv(path, "--select", f"a:1:{selection}")) == 2
    assert one_line_error(capsys) == f"zarrmax advise: --select 'a:1:{selection}': {expected}"


def test_advise_refuses_a_batch_window_along_a_dimension_the_variable_lacks(tmp_path, capsys):
    path = write(tmp_path / "d.zarr")
    assert main(advise_argv(path, "--pattern", "random-batch:1", "--batch-window", "time=4,lat=3")) == 2
    assert one_line_error(capsys) == ("zarrmax advise: --batch-window 'time=4,lat=3': dimension 'lat' is not one of "
                                      "'t''s ('time', 'x')")


def test_advise_takes_selections_inside_the_variable(tmp_path, capsys):
    path = write(tmp_path / "d.zarr")
    assert main(advise_argv(path, "--select", "a:1:time=-40:40,x=-1", "--top", "1")) == 0
    assert "layout advice for 't'" in capsys.readouterr().out


@pytest.mark.parametrize(("content", "got"), [
    (b"\xff\xfe garbage", "Got bytes that are not UTF-8 text (at byte 0) instead."),
    (b"[" * 100_000, "Got JSON nested too deep to parse instead."),
])
def test_advise_refuses_a_costs_file_that_is_not_json_naming_the_flag_and_file(tmp_path, capsys, content, got):
    """Was: ``zarrmax: RecursionError: ...``, exit 1, neither the flag nor the file named."""
    costs = tmp_path / "costs.json"
    costs.write_bytes(content)
    argv = ["advise", str(tmp_path / "never-opened.zarr"), "--pattern", "map:1", "--costs", str(costs)]
    assert main(argv) == 2
    assert one_line_error(capsys) == (f"zarrmax advise: --costs {str(costs)!r}: expected {str(costs)!r} to hold costs "
                                      f"saved as JSON (Costs.save). {got}")


@pytest.mark.parametrize(("where", "expected"), [
    ("missing/costs.json", "--save-costs {path!r}: its folder {folder!r} does not exist (or is no folder); expected "
                           "a file in an existing folder"),
    (".", "--save-costs {path!r} is a folder; expected the path of a file to write, e.g. --save-costs costs.json"),
])
def test_advise_checks_where_it_saves_costs_before_anything_is_probed(tmp_path, capsys, where, expected):
    """Was: the store opened, probed and searched, then a FileNotFoundError (exit 1) and the probe lost. The store
    here does not exist: refused before it is opened."""
    path = str(tmp_path / where)
    assert main(advise_argv(str(tmp_path / "never-opened.zarr"), "--pattern", "map:1", "--save-costs", path)) == 2
    folder = str(tmp_path / "missing")
    assert one_line_error(capsys) == "zarrmax advise: " + expected.format(path=path, folder=folder)



def test_advise_says_costs_it_could_not_save_after_advising(tmp_path, capsys, monkeypatch):
    """The folder checked before the probe can change while it runs: the write's failure names the flag."""
    from xarray_zarrmax.advise.model import Costs

    def refuse(self, path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(Costs, "save", refuse)
    saved = str(tmp_path / "costs.json")
    assert main(advise_argv(write(tmp_path / "d.zarr"), "--pattern", "map:1", "--save-costs", saved)) == 1
    assert one_line_error(capsys) == (f"zarrmax advise: --save-costs {saved!r}: cannot write it (Permission denied); "
                                      "the advice above stands, its costs were not saved")
