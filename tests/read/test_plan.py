"""The fast path reads a stored document only where a whitelist of names, configuration keys and values says
it decodes it exactly as zarr-python does; every other document zarr-python accepts goes to zarr-python."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xarray_zarrmax.errors import Unsupported
from xarray_zarrmax.read.plan import ArrayPlan, plan_array

V3_SHARDED: dict[str, Any] = {
    "zarr_format": 3, "node_type": "array", "shape": [8, 6], "data_type": "float32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 6]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0.0,
    "codecs": [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 3],
        "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                   {"name": "bytes", "configuration": {"endian": "big"}},
                   {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
                   {"name": "crc32c"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "start"}}],
    "attributes": {"units": "K"}, "dimension_names": ["t", "x"],
}
V3_PLAIN: dict[str, Any] = {
    **V3_SHARDED, "data_type": "int16",
    "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
               {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2,
                                                   "blocksize": 0}}],
}
V2: dict[str, Any] = {
    "zarr_format": 2, "shape": [8, 6], "chunks": [4, 3], "dtype": ">f8", "fill_value": None, "order": "F",
    "filters": None, "compressor": {"id": "zlib", "level": 1}, "dimension_separator": "/",
}


def zarr_parse(doc: dict[str, Any]) -> Any:
    """zarr-python's reading of the document (raises where zarr-python refuses it)."""
    from zarr.core.metadata.v2 import ArrayV2Metadata
    from zarr.core.metadata.v3 import ArrayV3Metadata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if doc.get("zarr_format") == 2:
            return ArrayV2Metadata.from_dict({**copy.deepcopy(doc), "attributes": {}})
        return ArrayV3Metadata.from_dict(copy.deepcopy(doc))


def plan_of(doc: dict[str, Any]) -> ArrayPlan:
    return plan_array("v", "g/v", zarr_parse(doc), doc)


def test_documents_zarr_writes_are_on_the_fast_path():
    sharded = plan_of(V3_SHARDED)
    assert sharded.shard is not None and sharded.shard.chunks_per_shard == (2, 2)
    assert not sharded.shard.index_at_end and sharded.shard.index_crc32c and not sharded.shard.index_big_endian
    assert sharded.codec.chunk_shape == (2, 3) and sharded.codec.order == (1, 0)
    assert sharded.codec.stored_dtype == np.dtype(">f4") and sharded.codec.bytes_codecs == ("zstd", "crc32c")
    plain = plan_of(V3_PLAIN)
    assert plain.shard is None and plain.keys.key((1, 0)) == "g/v/1.0" and plain.codec.bytes_codecs == ("blosc",)
    v2 = plan_of(V2)
    assert v2.codec.stored_dtype == np.dtype(">f8") and v2.codec.order == (1, 0) and v2.keys.key((1, 0)) == "g/v/1/0"


def edited(doc: dict[str, Any], edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    edit(out)
    return out


def sharding(d: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = d["codecs"][0]["configuration"]
    return config


#: documents zarr-python reads, whose fast-path reading is not whitelisted: the reason each must give.
DEFERRED = {
    "an extension field": (edited(V3_SHARDED, lambda d: d.update(ext={"must_understand": False})),
                           r"metadata fields \['ext'\]"),
    "a sharding key the fast path does not read": (
        edited(V3_SHARDED, lambda d: sharding(d).update(subchunk_write_order="morton")),
        r"'sharding_indexed' configuration keys \['subchunk_write_order'\]"),
    "a chunk key encoding written flat": (
        edited(V3_SHARDED, lambda d: d.update(chunk_key_encoding={"name": "default", "separator": "."})),
        "chunk key encoding"),
    "index codecs left to their default": (edited(V3_SHARDED, lambda d: sharding(d).pop("index_codecs")),
                                           "shard index codecs None"),
    "a storage transformer": (edited(V3_SHARDED, lambda d: d.update(storage_transformers=[{"name": "x"}])),
                              "storage transformers"),
    "a v2 extra key": (edited(V2, lambda d: d.update(_unknown_extension={"x": []})),
                       r"metadata fields \['_unknown_extension'\]"),
    "an empty v2 filter list": (edited(V2, lambda d: d.update(filters=[])), "v2 filters"),
    "a v2 compressor the fast path does not decode": (edited(V2, lambda d: d.update(compressor={"id": "lz4"})),
                                                       "v2 compressor 'lz4'"),
}


@pytest.mark.parametrize("case", sorted(DEFERRED))
def test_whatever_is_not_whitelisted_goes_to_zarr(case):
    doc, reason = DEFERRED[case]
    metadata = zarr_parse(doc)  # only documents zarr-python reads are cases
    with pytest.raises(Unsupported, match=reason):
        plan_array("v", "v", metadata, doc)


#: documents the fast path reads with a default: each must agree with zarr-python's reading.
DEFAULTS = {
    "chunk key encoding without configuration": edited(V3_SHARDED, lambda d: d.update(
        chunk_key_encoding={"name": "default"})),
    "v2 chunk key encoding without configuration": edited(V3_PLAIN, lambda d: d.update(
        chunk_key_encoding={"name": "v2"})),
    "index location left to its default": edited(V3_SHARDED, lambda d: sharding(d).pop("index_location")),
    "v2 without a dimension separator": edited(V2, lambda d: d.pop("dimension_separator")),
}


@pytest.mark.parametrize("case", sorted(DEFAULTS))
def test_defaults_are_zarrs(case):
    doc = DEFAULTS[case]
    assert_agrees_with_zarr(plan_of(doc), zarr_parse(doc))


def assert_agrees_with_zarr(plan: ArrayPlan, meta: Any) -> None:
    """What the plan reads from the document is what zarr-python's parse of it says (public attributes)."""
    assert plan.shape == tuple(meta.shape)
    assert plan.dtype == np.dtype(meta.dtype.to_native_dtype())
    assert plan.keys.key((1, 0)) == "g/v/" + meta.encode_chunk_key((1, 0))
    if meta.zarr_format == 2:
        assert plan.outer_chunks == tuple(meta.chunks)
        return
    assert plan.outer_chunks == tuple(meta.chunk_grid.chunk_shape)
    assert plan.inner_chunks == tuple(meta.chunks)
    codecs = [c.to_dict() for c in meta.codecs]
    if plan.shard is not None:
        config = codecs[0]["configuration"]
        assert plan.shard.index_at_end == (config["index_location"] == "end")
        assert plan.shard.index_crc32c == (len(config["index_codecs"]) == 2)
        codecs = [c.to_dict() for c in meta.inner_codecs]
    names = [c["name"] for c in codecs]
    assert list(plan.codec.bytes_codecs) == names[names.index("bytes") + 1:]
    endian = next(c for c in codecs if c["name"] == "bytes").get("configuration", {}).get("endian")
    if plan.dtype.itemsize > 1:
        assert plan.codec.stored_dtype.byteorder == {"big": ">", "little": "<"}[endian] or (
            plan.codec.stored_dtype.byteorder == "=" and endian == "little")


def _json() -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | st.integers(-2, 8) | st.sampled_from(["little", "big", "end", "start", "/", "."]),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=2),
        max_leaves=6,
    )


def _objects(node: Any) -> list[dict[str, Any]]:
    """Every JSON object in a document, the document included."""
    found = [node] if isinstance(node, dict) else []
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        found += _objects(child)
    return found


@st.composite
def mutated_documents(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from([V3_SHARDED, V3_PLAIN, V2])))
    for _ in range(draw(st.integers(1, 2))):
        target = draw(st.sampled_from(_objects(doc)))
        key = draw(st.sampled_from(sorted(target) + ["extra"]))
        if key in target and draw(st.booleans()):
            del target[key]
        else:
            target[key] = draw(_json())
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=mutated_documents())
def test_fuzz_plan_is_zarrs_reading_or_unsupported(doc):
    """Any document zarr-python reads: a plan that agrees with zarr-python's reading, or `Unsupported`."""
    try:
        meta = zarr_parse(doc)
    except Exception:
        return  # zarr-python refuses it: the open fails for both engines
    try:
        plan = plan_array("v", "g/v", meta, doc)
    except Unsupported:
        return
    assert_agrees_with_zarr(plan, meta)
