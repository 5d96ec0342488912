"""The zarrmax command and progress bars."""

from __future__ import annotations

import io

import dask
import numpy as np
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
    assert "no variables ['nope']" in capsys.readouterr().err


def test_storage_option_must_be_key_value(tmp_path):
    import pytest

    with pytest.raises(SystemExit, match="expected -o key=value. Got 'endpoint'"):
        main(["info", write(tmp_path / "d.zarr"), "-o", "endpoint"])


def test_dask_progress_bar_moves_shard_by_shard(tmp_path):
    path = write(tmp_path / "d.zarr")
    ds = xr.open_dataset(path, engine="zarrmax", chunks={})
    out = io.StringIO()
    with dask.config.set(scheduler="threads"), ProgressBar(out=out, dt=0.001):
        values = ds["t"].values
    assert "100% Completed" in out.getvalue()
    np.testing.assert_array_equal(values, np.arange(240, dtype="f4").reshape(40, 6))
