"""The device pipeline: batching, pinned-buffer pool and stream ordering, on the NumPy stand-in (CI) and on
CUDA where a GPU exists (marked gpu)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.devices import block_type, chosen_device, to_host
from tests.support.strategies import NUMERIC_DTYPES, array_specs, write_array
from xarray_zarrmax import CorruptDataError
from xarray_zarrmax.backend import ZarrmaxStore
from xarray_zarrmax.core.geometry import Axis
from xarray_zarrmax.gpu.device import HostDevice, PinnedPool
from xarray_zarrmax.gpu.read import device_decodable, read_selection_on
from xarray_zarrmax.storage import resolve_source


def test_import_does_not_import_cupy():
    code = "import xarray_zarrmax, xarray_zarrmax.backend, sys; print('cupy' in sys.modules, 'nvidia' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"


def test_cuda_without_cupy_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # as if cupy were not installed
    import xarray_zarrmax.gpu.cuda as gpu

    monkeypatch.setattr(gpu, "_device", None)
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=3)
    with pytest.raises(ImportError, match=r"requires cupy; pip install 'xarray_zarrmax\[gpu\]'"):
        xr.open_dataset(tmp_path / "g.zarr", engine="zarrmax", device="cuda")


def test_bad_device_name(tmp_path):
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=3)
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'. Got 'tpu'"):
        xr.open_dataset(tmp_path / "g.zarr", engine="zarrmax", device="tpu")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=array_specs(zarr_format=3))
def test_numpy_device_gives_zarr_answers(tmp_path_factory, spec):
    """The whole device path through xarray, on the NumPy stand-in: same values as engine="zarr"."""
    path = str(tmp_path_factory.mktemp("dev") / "d.zarr")
    write_array(path, spec)
    ours = xr.open_dataset(path, engine="zarrmax", chunks={}, device=HostDevice())
    oracle = xr.open_dataset(path, engine="zarr", consolidated=False)
    a, b = ours["v"].values, oracle["v"].values
    assert a.dtype == b.dtype
    if a.dtype == object:
        assert xr.DataArray(a).identical(xr.DataArray(b))
    else:
        np.testing.assert_array_equal(a, b)


def sharded(path, n_shards=6):
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(n_shards * 64,), chunks=(16,), shards=(64,), dtype="i4",
                             dimension_names=["x"], fill_value=-1)
    data = np.arange(n_shards * 64, dtype="i4")
    data[16:32] = -1  # one chunk left unwritten: a missing chunk in shard 0
    arr[:] = data
    return data


def _read_tasks(path, device, pool):
    """One read per shard, in order, on one thread: the buffer pool hands the same pinned buffer around."""
    store = ZarrmaxStore.open(resolve_source(str(path)))
    wrapper = store.wrapper(store.group.arrays["v"])
    plan = wrapper.plan
    assert device_decodable(plan.codec)
    n = plan.shape[0] // plan.outer_chunks[0]
    return [read_selection_on(device, plan, wrapper.source, (Axis(i * 64, (i + 1) * 64),), store.token, pool=pool)
            for i in range(n)]


def test_deferred_streams_with_pool_reuse_give_right_answers(tmp_path):
    data = sharded(tmp_path / "s.zarr")
    device = HostDevice(deferred=True)
    pool = PinnedPool(device, keep=1)
    outs = _read_tasks(tmp_path / "s.zarr", device, pool)
    assert pool.allocated == 1  # every task reused the one buffer, each after the previous copy ran
    device.flush()
    np.testing.assert_array_equal(np.concatenate(outs), data)


def test_deferred_streams_catch_a_buffer_reused_too_early(tmp_path, monkeypatch):
    """Control: a pool that forgets the copy's event hands the buffer out while the copy is still queued;
    the deferred stand-in then copies a later task's bytes, and the comparison fails. So the test above can
    fail."""
    data = sharded(tmp_path / "s.zarr")
    device = HostDevice(deferred=True)
    pool = PinnedPool(device, keep=1)
    original = PinnedPool.release
    monkeypatch.setattr(PinnedPool, "release", lambda self, buf, event: original(self, buf, None))
    outs = _read_tasks(tmp_path / "s.zarr", device, pool)
    try:
        device.flush()
        right = np.array_equal(np.concatenate(outs), data)
    except CorruptDataError:  # a later task's bytes under an earlier task's frame offsets
        right = False
    assert not right


def test_cpu_decoded_codecs_are_copied_once(tmp_path):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(100,), chunks=(10,), dtype="f8", dimension_names=["x"],
                             compressors=[zarr.codecs.GzipCodec()])
    arr[:] = np.linspace(0, 1, 100)
    device = HostDevice(deferred=True)
    store = ZarrmaxStore.open(resolve_source(str(tmp_path / "g.zarr")))
    wrapper = store.wrapper(store.group.arrays["v"])
    assert not device_decodable(wrapper.plan.codec)
    out = read_selection_on(device, wrapper.plan, wrapper.source, (Axis(0, 100),), store.token, pool=PinnedPool(device))
    device.flush()
    np.testing.assert_array_equal(out, np.linspace(0, 1, 100))


# -- on the device the gpu tests are given (CUDA under ci/gpu_check.sh; the stand-in elsewhere) -----------------


@pytest.mark.gpu
def test_device_blocks_are_device_arrays_and_match_zarr(tmp_path, device):
    data = sharded(tmp_path / "s.zarr")
    ds = xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax", chunks={}, device=device, consolidated=False)
    assert isinstance(ds["v"].data._meta, block_type())
    result = ds["v"].compute().data
    assert isinstance(result, block_type())
    np.testing.assert_array_equal(to_host(result), data)
    lazy = xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax", device=device, consolidated=False)
    assert isinstance(lazy["v"].compute().data, block_type())


@pytest.mark.gpu
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=array_specs(zarr_format=3, dtype=st.sampled_from(NUMERIC_DTYPES)))  # CuPy holds no strings or times
def test_device_gives_zarr_answers_for_every_numeric_dtype(tmp_path_factory, spec):
    device = chosen_device()
    path = str(tmp_path_factory.mktemp("gpu") / "d.zarr")
    write_array(path, spec)
    ours = xr.open_dataset(path, engine="zarrmax", chunks={}, device=device, mask_and_scale=False)
    oracle = xr.open_dataset(path, engine="zarr", consolidated=False, mask_and_scale=False)
    np.testing.assert_array_equal(to_host(ours["v"].compute().data), oracle["v"].values)


@pytest.mark.parametrize("case", ["two sized frames", "two unsized frames", "a skippable frame first",
                                  "a skippable frame last", "a second frame beyond the chunk"])
def test_a_chunk_of_several_zstd_frames_is_refused_on_the_device_and_read_on_the_cpu(tmp_path, case):
    """Legal zstd (numcodecs and our CPU path read across frames), but nvCOMP decodes one frame a chunk: the
    device path says so instead of handing the batch a chunk it would decode short or partly (found by an
    adversarial review: only a first frame declaring another size was refused)."""
    import struct

    import zstandard

    group = zarr.open_group(str(tmp_path / "f.zarr"), mode="w", zarr_format=3)
    group.create_array("v", shape=(64,), chunks=(64,), dtype="i4", dimension_names=["x"])[:] = np.arange(64)
    payload = np.arange(64, dtype="i4").tobytes()
    sized = zstandard.ZstdCompressor(write_content_size=True).compress

    def unsized(data: bytes) -> bytes:
        stream = zstandard.ZstdCompressor(write_content_size=False).compressobj()
        return stream.compress(data) + stream.flush()

    skippable = struct.pack("<II", 0x184D2A50, 2) + b"ab"
    chunk = {"two sized frames": sized(payload[:100]) + sized(payload[100:]),
             "two unsized frames": unsized(payload[:100]) + unsized(payload[100:]),
             "a skippable frame first": skippable + sized(payload),
             "a skippable frame last": sized(payload) + skippable,
             "a second frame beyond the chunk": sized(payload) + sized(payload)}[case]
    (tmp_path / "f.zarr" / "v" / "c" / "0").write_bytes(chunk)
    if case != "a second frame beyond the chunk":  # that one engine="zarr" refuses too
        np.testing.assert_array_equal(xr.open_dataset(tmp_path / "f.zarr", engine="zarrmax")["v"].values,
                                      np.arange(64))
    with pytest.raises(CorruptDataError, match=r"key 'v/c/0': the zstd chunk is \d frames, or has skippable ones: "
                                               r"device='cuda' decodes zstd chunks of one frame only"):
        xr.open_dataset(tmp_path / "f.zarr", engine="zarrmax", device=HostDevice())["v"].values  # noqa: B018


@pytest.mark.parametrize("elements", [64, 60])
def test_a_frame_without_a_size_is_decoded_aside_and_its_size_checked_on_the_device(tmp_path, elements):
    """Straight into the output, a frame that decodes short would leave the rest of its chunk unwritten."""
    import zstandard

    group = zarr.open_group(str(tmp_path / "u.zarr"), mode="w", zarr_format=3)
    group.create_array("v", shape=(64,), chunks=(64,), dtype="i4", dimension_names=["x"])[:] = np.arange(64)
    stream = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    (tmp_path / "u.zarr" / "v" / "c" / "0").write_bytes(
        stream.compress(np.arange(elements, dtype="i4").tobytes()) + stream.flush())
    ours = xr.open_dataset(tmp_path / "u.zarr", engine="zarrmax", device=HostDevice())["v"]
    if elements == 64:
        np.testing.assert_array_equal(ours.values, np.arange(64))
    else:
        with pytest.raises(CorruptDataError, match=r"key 'v/c/0'.*decoded 240 bytes, expected 256"):
            ours.values  # noqa: B018


class _TrustingDevice(HostDevice):
    """A device that, like nvCOMP's zstd, cannot be trusted to notice corrupt input: the corrupted shard
    (key v/c/0) reaching it is a failure."""

    def decode_zstd(self, packed, offsets, sizes, stream, out=None, names=None):
        if any("'v/c/0'" in name for name in names):
            raise AssertionError(f"corrupt frames reached the device decoder: {names}")
        return super().decode_zstd(packed, offsets, sizes, stream, out=out, names=names)


@pytest.mark.parametrize("where", ["the frame's magic number", "a reserved bit of the frame header",
                                   "a reserved block type"])
def test_corrupt_zstd_frames_are_refused_on_the_host_before_the_device_decodes(tmp_path, where):
    """nvCOMP's zstd "can only operate on valid input data" (its release notes): frames are walked on the host
    first, and one zstd itself would refuse never reaches the device."""
    from tests.support.corrupt import shard_file, sharded_store

    path = sharded_store(tmp_path / "c.zarr", crc_inner=False)
    blob = bytearray(open(shard_file(path), "rb").read())
    if where == "the frame's magic number":
        blob[0:4] = b"\xde\xad\xbe\xef"
    elif where == "a reserved bit of the frame header":
        blob[4] |= 0x08
    else:  # the first block header follows the 6-byte frame header (descriptor 0x20: single segment, 1-byte size)
        assert blob[4] == 0x20, blob[4]
        blob[6] |= 0x06  # block type 3
    open(shard_file(path), "wb").write(bytes(blob))
    with pytest.raises(CorruptDataError, match=r"'v/c/0'.*zstd could not decode the chunk"):
        xr.open_dataset(path, engine="zarrmax", chunks={}, device=_TrustingDevice(), consolidated=False)["v"].compute()


def test_the_stand_in_travels_to_other_processes_as_a_fresh_device():
    """A dask worker process gets its own stand-in, as ``device="cuda"`` names each worker's own GPU."""
    import pickle

    device = HostDevice(deferred=True)
    device.stream()
    copy = pickle.loads(pickle.dumps(device))
    assert isinstance(copy, HostDevice) and copy.deferred and copy.streams == []
