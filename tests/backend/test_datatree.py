"""DataTree: ``open_datatree`` and ``open_groups`` give what engine="zarr" gives, with the whole hierarchy's
metadata in the fewest round trips (request counts and round trips asserted)."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from tests.support.compare import assert_same_dataset, builtin_types
from xarray_zarrmax import request_counts, set_config
from xarray_zarrmax.backend import ZarrmaxBackendEntrypoint
from xarray_zarrmax.errors import GroupNotFoundError, MetadataError
from xarray_zarrmax.storage import ByteSource, ZarrStoreSource
from xarray_zarrmax.testing import TREE_GROUPS, write_group_tree


def sample_tree() -> xr.DataTree:
    """Three levels: CF-encoded coordinates inherited from the root, a scaled variable, a sharded one, a
    group holding only attributes, an empty group, and a deeper branch with its own dimensions."""
    rng = np.random.default_rng(0)
    time = pd.date_range("2021-01-01", periods=6, freq="D")
    root = xr.Dataset(coords={"time": time}, attrs={"title": "hierarchy", "Conventions": "CF-1.8"})
    forecast = xr.Dataset(
        {
            "t2m": (("time", "x"), rng.normal(size=(6, 8)).astype("f4"), {"units": "K"}),
            "scaled": (("time",), np.arange(6, dtype="f8")),
        },
        coords={"x": np.arange(8.0), "step": ("time", pd.to_timedelta(np.arange(6), unit="h"))},
        attrs={"kind": "forecast"},
    )
    forecast["scaled"].encoding = {"scale_factor": 0.5, "add_offset": 1.0, "dtype": "i2", "_FillValue": -1}
    ensemble = xr.Dataset(
        {"spread": (("time", "member"), rng.random((6, 3)))},
        coords={"member": [10, 20, 30]},
    )
    obs = xr.Dataset({"count": (("station",), np.array([1, 2, 3, 4], dtype="i4"))},
                     coords={"station": [101, 102, 103, 104]})
    return xr.DataTree.from_dict({
        "/": root,
        "/forecast": forecast,
        "/forecast/ensemble": ensemble,
        "/metadata_only": xr.Dataset(attrs={"source": "model", "version": 3}),
        "/obs": obs,
        "/obs/empty": xr.Dataset(),
        "/obs/empty/deeper": xr.Dataset({"flag": (("level",), np.array([True, False]))}),
    })


def write_tree(store: Any, zarr_format: int, consolidated: bool) -> None:
    encoding = {}
    if zarr_format == 3:
        encoding = {"/forecast": {"t2m": {"chunks": (2, 4), "shards": (4, 8)}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's warnings about v2 string and consolidated metadata
        sample_tree().to_zarr(store, mode="w", zarr_format=zarr_format, consolidated=consolidated,
                              encoding=encoding)


def open_tree(target: Any, engine: str, **kwargs: Any) -> xr.DataTree:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # engine="zarr" falls back from consolidated metadata with a warning
        return xr.open_datatree(target, engine=engine, **kwargs)


def open_groups(target: Any, engine: str, **kwargs: Any) -> dict[str, xr.Dataset]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_groups(target, engine=engine, **kwargs)


def assert_same_tree(ours: xr.DataTree, oracle: xr.DataTree) -> None:
    """Identical trees, and in every group the same dtypes and encoding as engine="zarr" reports."""
    ours, oracle = ours.compute(), oracle.compute()
    xr.testing.assert_identical(ours, oracle)
    assert sorted(n.path for n in ours.subtree) == sorted(n.path for n in oracle.subtree)  # any order, as zarr lists
    for node in oracle.subtree:
        assert_same_dataset(ours[node.path].to_dataset(inherit=False), node.to_dataset(inherit=False))


@pytest.mark.parametrize("store_factory", ["local", "memory", "minio"], indirect=True)
@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
def test_tree_identical_to_engine_zarr(store_factory, zarr_format, consolidated):
    written = store_factory.new()
    write_tree(written.store, zarr_format, consolidated)
    written.finish()
    with set_config(task_bytes=0):  # one dask task per stored object, as engine="zarr"
        ours = open_tree(written.target, "zarrmax", chunks={}, **written.open_kwargs)
    oracle = open_tree(written.oracle_store, "zarr", chunks={})
    assert_same_tree(ours, oracle)
    if zarr_format == 3:
        assert ours["forecast"].t2m.chunks == ((4, 2), (8,))  # one dask chunk per shard
    with set_config(task_bytes=32 << 20):  # small objects grouped
        grouped = open_tree(written.target, "zarrmax", chunks={}, **written.open_kwargs)
    assert_same_tree(grouped, oracle)
    if zarr_format == 3:
        assert grouped["forecast"].t2m.chunks == ((6,), (8,))
    assert ours.time.dtype == np.dtype("datetime64[ns]")
    assert ours["forecast"].step.dtype.kind == "m"  # decoded, in whatever unit engine="zarr" decodes it
    assert "time" in ours["forecast/ensemble"].coords  # inherited from the root

    ours_groups = open_groups(written.target, "zarrmax", **written.open_kwargs)
    oracle_groups = open_groups(written.oracle_store, "zarr")
    assert sorted(ours_groups) == sorted(oracle_groups)
    for key, ds in oracle_groups.items():
        assert_same_dataset(ours_groups[key].load(), ds.load())


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [None, False])
@pytest.mark.parametrize("group", ["forecast", "/forecast/", "forecast/ensemble", "obs/empty", "/", ""])
def test_group_opens_the_subtree_keyed_as_engine_zarr(tmp_path, zarr_format, consolidated, group):
    path = str(tmp_path / "tree.zarr")
    write_tree(path, zarr_format, consolidated=True)
    kwargs = {"group": group, "consolidated": consolidated}
    ours = open_groups(path, "zarrmax", **kwargs)
    oracle = open_groups(path, "zarr", **kwargs)
    assert list(ours) == sorted(oracle, key=lambda k: k.split("/") if k not in ("/", ".") else [])
    for key, ds in oracle.items():
        assert_same_dataset(ours[key].load(), ds.load())
    assert_same_tree(open_tree(path, "zarrmax", **kwargs), open_tree(path, "zarr", **kwargs))


def test_icechunk_session(store_factory_icechunk):
    written = store_factory_icechunk.new()
    write_tree(written.store, 3, consolidated=False)
    written.finish()
    assert_same_tree(open_tree(written.target, "zarrmax", chunks={}), open_tree(written.oracle_store, "zarr"))


@pytest.fixture
def store_factory_icechunk(session_tmp):
    pytest.importorskip("icechunk")
    from tests.support.stores import StoreFactory

    return StoreFactory("icechunk-local", session_tmp)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("decoders", [
    {"decode_times": False},
    {"mask_and_scale": False},
    {"decode_cf": False},
    {"decode_timedelta": False},
    {"drop_variables": ["t2m", "member"]},
    {"drop_variables": "time"},
    {"decode_coords": "all", "concat_characters": False},
])
def test_decoding_arguments_apply_to_every_group(tmp_path, zarr_format, decoders):
    path = str(tmp_path / "tree.zarr")
    write_tree(path, zarr_format, consolidated=True)
    assert_same_tree(open_tree(path, "zarrmax", **decoders), open_tree(path, "zarr", **decoders))


def write_misaligned(path: str, zarr_format: int, consolidated: bool) -> None:
    """A child whose index coordinate conflicts with its parent's: a DataTree cannot hold it."""
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    for group, values in ((root, [1, 2, 3]), (root.create_group("child"), [1, 2])):
        dims = {"dimension_names": ["x"]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["x"]}}
        group.create_array("x", shape=(len(values),), dtype="i8", **dims)[:] = values
    if consolidated:
        zarr.consolidate_metadata(path)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
def test_misaligned_groups_fail_the_tree_not_the_groups(tmp_path, zarr_format, consolidated):
    path = str(tmp_path / "bad.zarr")
    write_misaligned(path, zarr_format, consolidated)
    with pytest.raises(ValueError, match="not aligned") as theirs:
        open_tree(path, "zarr")
    with pytest.raises(ValueError, match="not aligned") as ours:
        open_tree(path, "zarrmax")
    assert builtin_types(theirs.value) <= {c for c in builtin_types(ours.value)}
    groups = open_groups(path, "zarrmax")
    assert list(groups) == ["/", "/child"]
    assert groups["/child"].x.values.tolist() == [1, 2]


def error_of(engine: str, target: Any, **kwargs: Any) -> BaseException:
    try:
        open_tree(target, engine, **kwargs)
    except Exception as err:
        return err
    raise AssertionError(f"engine={engine!r} opened it without an error")


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
@pytest.mark.parametrize("kwargs", [
    {"group": "nope"},
    {"group": "forecast/nope", "consolidated": False},
    {"group": "nope", "consolidated": True},
    {"consolidated": True},
    {"zarr_format": 5},
], ids=str)
def test_errors_of_the_types_engine_zarr_raises(tmp_path, zarr_format, consolidated, kwargs):
    path = str(tmp_path / "tree.zarr")
    write_tree(path, zarr_format, consolidated)
    kwargs = {**kwargs}
    try:
        open_tree(path, "zarr", **kwargs)
    except Exception as err:
        theirs = err
    else:
        open_tree(path, "zarrmax", **kwargs)  # engine="zarr" opens it: so must we
        return
    ours = error_of("zarrmax", path, **kwargs)
    missing = [t.__name__ for t in builtin_types(theirs) if not isinstance(ours, t)]
    assert not missing, f"{type(ours).__name__}: {ours} is not a {missing} as zarr's {type(theirs).__name__}: {theirs}"


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
def test_missing_group_is_named(tmp_path, zarr_format, consolidated):
    path = str(tmp_path / "tree.zarr")
    write_tree(path, zarr_format, consolidated)
    with pytest.raises(GroupNotFoundError, match="forecast/nope") as err:
        open_tree(path, "zarrmax", group="forecast/nope")
    assert isinstance(err.value, KeyError) and isinstance(err.value, FileNotFoundError)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_wrong_zarr_format_and_missing_store(tmp_path, zarr_format):
    path = str(tmp_path / "tree.zarr")
    write_tree(path, zarr_format, consolidated=True)
    other = 5 - zarr_format
    theirs, ours = error_of("zarr", path, zarr_format=other), error_of("zarrmax", path, zarr_format=other)
    assert all(isinstance(ours, t) for t in builtin_types(theirs)), (ours, theirs)
    theirs, ours = error_of("zarr", str(tmp_path / "nope.zarr")), error_of("zarrmax", str(tmp_path / "nope.zarr"))
    assert all(isinstance(ours, t) for t in builtin_types(theirs)), (ours, theirs)
    assert isinstance(ours, FileNotFoundError)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
def test_group_naming_an_array_says_so(tmp_path, zarr_format, consolidated):
    """engine="zarr" fails with AttributeError ('Array' object has no attribute 'groups'); ours names it."""
    path = str(tmp_path / "tree.zarr")
    write_tree(path, zarr_format, consolidated)
    with pytest.raises(MetadataError, match=r"forecast/t2m|\.zgroup") as err:
        open_tree(path, "zarrmax", group="forecast/t2m")
    if consolidated or zarr_format == 3:
        assert "array" in str(err.value).lower()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_subgroup_opens_without_a_group_at_the_root(tmp_path, zarr_format):
    """Without consolidated metadata, group= needs no group at the store's root (engine="zarr" opens the root)."""
    path = tmp_path / "tree.zarr"
    write_tree(str(path), zarr_format, consolidated=False)
    for name in ("zarr.json", ".zgroup", ".zattrs"):
        (path / name).unlink(missing_ok=True)
    tree = open_tree(str(path), "zarrmax", group="obs")
    assert set(tree.children) == {"empty"} and tree["empty/deeper"].flag.values.tolist() == [True, False]


def test_consolidated_member_outside_any_group_raises(tmp_path):
    path = tmp_path / "tree.zarr"
    write_tree(str(path), 3, consolidated=True)
    doc = json.loads((path / "zarr.json").read_text())
    members = doc["consolidated_metadata"]["metadata"]
    members["ghost/v"] = members.pop("forecast/t2m")
    (path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(MetadataError, match=r"member 'ghost/v' .* not inside a group: no group 'ghost'"):
        open_tree(str(path), "zarrmax")


def test_consolidated_v3_subtree_uses_the_root_metadata_only(tmp_path):
    """With group= the root's consolidated metadata is read (as engine="zarr" does), not the group's zarr.json."""
    path = str(tmp_path / "tree.zarr")
    write_tree(path, 3, consolidated=True)
    with request_counts() as counts:
        tree = open_tree(path, "zarrmax", group="forecast")
    assert [k for _, _, k in counts.keys if k.endswith("zarr.json")] == ["zarr.json"]
    assert counts.total("list") == 0
    assert set(tree.children) == {"ensemble"}


def test_signature_follows_xarray_conventions():
    import inspect

    assert ZarrmaxBackendEntrypoint.supports_groups
    for method in (ZarrmaxBackendEntrypoint.open_datatree, ZarrmaxBackendEntrypoint.open_groups_as_dict):
        params = inspect.signature(method).parameters
        assert "chunks" not in params and "cache" not in params
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
        assert all(p.kind is p.KEYWORD_ONLY for n, p in params.items() if n not in ("self", "filename_or_obj"))
        assert set(params) - {"self", "variables"} <= set(ZarrmaxBackendEntrypoint.open_dataset_parameters)


# -- requests: a 3-level tree of 10 groups and 100 arrays -------------------------------------------------

GROUPS = TREE_GROUPS  # 10 groups over 3 levels
ARRAYS_PER_GROUP = 10  # one index coordinate and 9 data variables: 100 arrays


def write_hierarchy(store: Any, zarr_format: int, consolidated: bool) -> None:
    write_group_tree(store, zarr_format, consolidated=consolidated, arrays_per_group=ARRAYS_PER_GROUP)


@pytest.fixture(scope="module")
def hierarchies(request, tmp_path_factory):
    """{(zarr_format, consolidated): (target, open kwargs)} on MinIO."""
    minio, bucket = request.getfixturevalue("minio"), request.getfixturevalue("bucket")
    out = {}
    for zarr_format in (2, 3):
        for consolidated in (True, False):
            prefix = f"tree-requests-v{zarr_format}-{'cons' if consolidated else 'plain'}.zarr"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                write_hierarchy(zarr.storage.ObjectStore(minio.obstore(bucket, prefix)), zarr_format, consolidated)
            out[zarr_format, consolidated] = (f"s3://{bucket}/{prefix}", {"storage_options": minio.storage_options()})
    return out


def counted_open(target: str, **kwargs: Any) -> tuple[xr.DataTree, Any]:
    with request_counts() as counts:
        tree = xr.open_datatree(target, engine="zarrmax", chunks={}, **kwargs)
    assert len(list(tree.subtree)) == len(GROUPS)
    assert sum(len(n.to_dataset(inherit=False).variables) for n in tree.subtree) == len(GROUPS) * ARRAYS_PER_GROUP
    return tree, counts


def data_keys(counts: Any) -> list[str]:
    return sorted(k for _, kind, k in counts.keys if kind == "get" and k.rsplit("/", 1)[-1][0].isdigit())


COORDINATE_CHUNKS_V3 = sorted(f"{p}/d{i}/c/0".lstrip("/") for i, p in enumerate(GROUPS))
COORDINATE_CHUNKS_V2 = sorted(f"{p}/d{i}/0".lstrip("/") for i, p in enumerate(GROUPS))


@pytest.mark.s3
def test_consolidated_v3_tree_is_one_metadata_get(hierarchies):
    target, kw = hierarchies[3, True]
    _, counts = counted_open(target, **kw)
    # 1 GET of the root zarr.json for all 10 groups and 100 arrays, + 1 GET per index coordinate (10)
    assert counts.total("get") == 1 + 10, counts.keys
    assert counts.total("list") == 0
    assert [k for _, _, k in counts.keys if not k.rsplit("/", 1)[-1][0].isdigit()] == ["zarr.json"]
    assert data_keys(counts) == COORDINATE_CHUNKS_V3


@pytest.mark.s3
@pytest.mark.parametrize("consolidated", [None, False])
def test_unconsolidated_v3_tree_lists_each_group_once(hierarchies, consolidated):
    target, kw = hierarchies[3, False]
    _, counts = counted_open(target, consolidated=consolidated, **kw)
    assert counts.total("list") == len(GROUPS) == 10
    listed = sorted(k.strip("/") for _, kind, k in counts.keys if kind == "list")
    assert listed == sorted(GROUPS)
    # one zarr.json per node (10 groups + 100 arrays), once each, + 10 index coordinates
    assert counts.total("get") == 10 + 100 + 10, counts.keys
    metadata = Counter(k for _, kind, k in counts.keys if k.endswith("zarr.json"))
    assert len(metadata) == 110 and set(metadata.values()) == {1}
    assert data_keys(counts) == COORDINATE_CHUNKS_V3
    assert not [k for _, _, k in counts.keys if ".z" in k]  # no v2 probing in a v3 tree


@pytest.mark.s3
@pytest.mark.parametrize("zarr_format", [None, 2])
def test_consolidated_v2_tree_is_the_roots_three_documents(hierarchies, zarr_format):
    """As zarr-python: .zmetadata with the root's own .zgroup (it must exist) and .zattrs (its live attributes),
    sent together; nothing else but the coordinates' chunks."""
    target, kw = hierarchies[2, True]
    _, counts = counted_open(target, zarr_format=zarr_format, **kw)
    probes = ["zarr.json"] if zarr_format is None else []  # the v3 root is looked for first
    metadata = [k for _, _, k in counts.keys if not k.rsplit("/", 1)[-1][0].isdigit()]
    assert metadata[:len(probes)] == probes
    assert sorted(metadata[len(probes):]) == [".zattrs", ".zgroup", ".zmetadata"]
    assert counts.total("get") == len(probes) + 3 + 10
    assert counts.total("list") == 0
    assert data_keys(counts) == COORDINATE_CHUNKS_V2


@pytest.mark.s3
def test_unconsolidated_v2_tree(hierarchies):
    target, kw = hierarchies[2, False]
    _, counts = counted_open(target, consolidated=False, zarr_format=2, **kw)
    assert counts.total("list") == 10
    # root .zgroup + .zattrs; per array .zarray + .zattrs (200); per subgroup .zarray (missing), .zattrs and
    # .zgroup (27); + 10 index coordinates
    assert counts.total("get") == 2 + 200 + 27 + 10, counts.keys
    assert Counter(k for _, kind, k in counts.keys if kind == "get").most_common(1)[0][1] == 1
    assert data_keys(counts) == COORDINATE_CHUNKS_V2


@pytest.mark.s3
@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
def test_request_hierarchy_matches_engine_zarr(hierarchies, minio, bucket, zarr_format, consolidated):
    target, kw = hierarchies[zarr_format, consolidated]
    prefix = target.split("/", 3)[3]
    ours = open_tree(target, "zarrmax", chunks={}, **kw)
    oracle = open_tree(zarr.storage.ObjectStore(minio.obstore(bucket, prefix)), "zarr", chunks={})
    assert_same_tree(ours, oracle)


# -- round trips: the walk is per level, never per group or per array ---------------------------------------


class WaveSource(ByteSource):
    """A source that holds every request until the I/O loop has nothing else to do, then answers all held
    requests at once: one wave per round trip, whatever the real store's latency. ``waves`` lists what each
    round trip asked for, as (kind, key)."""

    is_local = False

    def __init__(self, inner: ByteSource) -> None:
        self.inner = inner
        self.label = inner.label
        self.waves: list[list[tuple[str, str]]] = []
        self._held: list[tuple[asyncio.Future[None], str, str]] = []
        self._asked = 0
        self._driver: asyncio.Task[None] | None = None

    async def _hold(self, kind: str, key: str) -> None:
        future = asyncio.get_running_loop().create_future()
        self._held.append((future, kind, key))
        self._asked += 1
        if self._driver is None or self._driver.done():
            self._driver = asyncio.ensure_future(self._drive())
        await future

    async def _drive(self) -> None:
        while True:
            asked = -1
            while asked != self._asked:  # settle: every task that can run has run
                asked = self._asked
                for _ in range(200):
                    await asyncio.sleep(0)
            if not self._held:
                return
            wave, self._held = self._held, []
            self.waves.append(sorted((kind, key) for _, kind, key in wave))
            for future, _, _ in wave:
                if not future.done():
                    future.set_result(None)

    async def get(self, key: str) -> Any:
        await self._hold("get", key)
        return await self.inner.get(key)

    async def get_large(self, key: str, max_size: int | None = None) -> Any:
        await self._hold("get", key)
        return await self.inner.get_large(key, max_size)

    async def get_ranges(self, key: str, ranges: Any, version: Any = None) -> Any:
        await self._hold("get", key)
        return await self.inner.get_ranges(key, ranges, version)

    async def get_suffix(self, key: str, nbytes: int) -> Any:
        await self._hold("get", key)
        return await self.inner.get_suffix(key, nbytes)

    async def get_prefix(self, key: str, nbytes: int) -> Any:
        await self._hold("get", key)
        return await self.inner.get_prefix(key, nbytes)

    async def list_dir(self, prefix: str) -> list[str]:
        await self._hold("list", prefix)
        return await self.inner.list_dir(prefix)

    def zarr_store(self) -> Any:
        return self.inner.zarr_store()


def metadata_waves(source: WaveSource) -> list[Counter[str]]:
    """Per round trip: how many LISTs, metadata GETs and data GETs were sent."""
    def what(kind: str, key: str) -> str:
        last = key.rsplit("/", 1)[-1]
        return "list" if kind == "list" else "data" if last[:1].isdigit() else "meta"

    return [Counter(what(kind, key) for kind, key in wave) for wave in source.waves]


def waves_of(written_format: int, written_consolidated: bool, **kwargs: Any) -> list[Counter[str]]:
    store = zarr.storage.MemoryStore()
    write_hierarchy(store, written_format, written_consolidated)
    source = WaveSource(ZarrStoreSource(store))
    tree = xr.open_datatree(source, engine="zarrmax", **kwargs)
    assert len(list(tree.subtree)) == len(GROUPS)
    return metadata_waves(source)


def test_consolidated_tree_is_two_round_trips():
    # the root's zarr.json, then the 10 index coordinates of every group together
    assert waves_of(3, True) == [Counter(meta=1), Counter(data=10)]
    # v2: the v3 root is looked for first, unless zarr_format=2; then .zmetadata, .zgroup and .zattrs together
    assert waves_of(2, True) == [Counter(meta=1), Counter(meta=3), Counter(data=10)]
    assert waves_of(2, True, zarr_format=2) == [Counter(meta=3), Counter(data=10)]


def test_unconsolidated_v3_walk_is_two_round_trips_per_level():
    assert waves_of(3, False, consolidated=False) == [
        Counter(meta=1, list=1),  # the root's zarr.json with its LIST
        Counter(meta=3 + 10),  # level 1: every child of the root (3 groups, 10 arrays)
        Counter(list=3, data=1),  # the 3 groups listed together; the root's index coordinate
        Counter(meta=6 + 30),  # level 2: every child of the 3 groups
        Counter(list=6, data=3),
        Counter(meta=60),  # level 3: the arrays of the 6 deepest groups
        Counter(data=6),
    ]
    # consolidated=None: the root's zarr.json is read for its consolidated metadata first, then listed
    assert waves_of(3, False)[:3] == [Counter(meta=1), Counter(list=1), Counter(meta=13)]


def test_unconsolidated_v2_walk_asks_for_the_roots_documents_once():
    """consolidated=None: the root's .zgroup and .zattrs go out with the .zmetadata probe, and the walk uses
    them rather than asking again (each metadata key read once, as with consolidated=False)."""
    store = zarr.storage.MemoryStore()
    write_hierarchy(store, 2, False)
    source = WaveSource(ZarrStoreSource(store))
    xr.open_datatree(source, engine="zarrmax", zarr_format=2)
    keys = Counter(key for wave in source.waves for kind, key in wave if kind != "list")
    assert keys[".zgroup"] == keys[".zattrs"] == keys[".zmetadata"] == 1
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]


def test_unconsolidated_v2_walk_is_per_level():
    assert waves_of(2, False, consolidated=False, zarr_format=2) == [
        Counter(meta=2, list=1),  # .zgroup and .zattrs with the LIST
        Counter(meta=2 * 13),  # .zarray and .zattrs of every child
        Counter(meta=3, list=3, data=1),  # the 3 non-arrays: .zgroup with their LIST
        Counter(meta=2 * 36),
        Counter(meta=6, list=6, data=3),
        Counter(meta=2 * 60),
        Counter(data=6),
    ]


def _subgroup_consolidated_then_changed(path: Any, change: str) -> None:
    """A root without consolidated metadata whose group "s1" has its own, taken before ``change`` under it."""
    root = zarr.open_group(path, mode="w", zarr_format=3, attributes={"r": 1})
    s2 = root.create_group("s1", attributes={"a": 1}).create_group("s2", attributes={"b": 1})
    s2.create_array("v", shape=(3,), dtype="f8", dimension_names=["x"])[:] = [1, 2, 3]
    zarr.consolidate_metadata(path, path="s1")
    s2 = zarr.open_group(path, mode="r+", path="s1/s2", use_consolidated=False)
    if change == "array added":
        s2.create_array("w", shape=(3,), dtype="f8", dimension_names=["x"])[:] = [4, 5, 6]
    elif change == "attributes and an array rewritten":
        s2.attrs["b"] = 2
        s2.create_array("v", shape=(4,), dtype="i2", dimension_names=["x"], overwrite=True)[:] = [7, 8, 9, 10]
    elif change == "group nested and consolidated":
        s2.create_group("s3").create_array("u", shape=(2,), dtype="f4", dimension_names=["y"])[:] = [1, 2]
        zarr.consolidate_metadata(path, path="s1/s2")


@pytest.mark.parametrize("consolidated", [None, False])
@pytest.mark.parametrize("change", ["array added", "attributes and an array rewritten",
                                    "group nested and consolidated"])
def test_a_subgroups_own_consolidated_metadata_lists_groups_but_not_their_members(tmp_path, consolidated, change):
    """Found by a review: walking down from a root without consolidated metadata, zarr-python takes the groups
    below "s1" from s1's own consolidated metadata, but reads each of them live (``root["s1/s2"]``); we read
    their members from s1's metadata too, so an array added since vanished from the tree."""
    path = tmp_path / "t.zarr"
    _subgroup_consolidated_then_changed(path, change)
    for open_ in (xr.open_datatree, xr.open_groups):
        expected = open_(path, engine="zarr", consolidated=consolidated)
        got = open_(path, engine="zarrmax", consolidated=consolidated)
        groups = dict(expected.subtree_with_keys) if isinstance(expected, xr.DataTree) else expected
        theirs = {k: (n.to_dataset(inherit=False) if isinstance(n, xr.DataTree) else n) for k, n in groups.items()}
        mine = got if isinstance(got, dict) else dict(got.subtree_with_keys)
        ours = {k: (n.to_dataset(inherit=False) if isinstance(n, xr.DataTree) else n) for k, n in mine.items()}
        assert sorted(ours) == sorted(theirs)
        for key, ds in theirs.items():
            assert_same_dataset(ours[key], ds)
    if change == "array added":
        assert "w" in xr.open_datatree(path, engine="zarrmax", consolidated=consolidated)["s1/s2"].data_vars


def test_a_group_listed_in_a_subgroups_consolidated_metadata_but_gone_is_a_key_error_as_in_zarr(tmp_path):
    import shutil

    path = tmp_path / "t.zarr"
    _subgroup_consolidated_then_changed(path, "array added")
    shutil.rmtree(path / "s1" / "s2")
    with pytest.raises(KeyError):
        xr.open_datatree(path, engine="zarr")
    with pytest.raises(GroupNotFoundError, match=r"group 's1/s2', a member in the consolidated metadata of group "
                                                 r"'s1', not found in .*: that metadata is out of date") as info:
        xr.open_datatree(path, engine="zarrmax")
    assert isinstance(info.value, KeyError)
