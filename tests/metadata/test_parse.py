"""Metadata loading: one parse per distinct array structure gives exactly zarr-python's parse of each."""

from __future__ import annotations

import json

import pytest

from xarray_zarrmax.metadata import MetadataParser


def doc(name: str, dims=("t", "x"), fill=0.0, shape=(4, 6)) -> dict:
    return {
        "zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                       {"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
        "attributes": {"long_name": name, "units": "K"}, "dimension_names": list(dims) if dims else None,
    }


@pytest.mark.parametrize("variant", [
    {}, {"dims": ("a", "b")}, {"dims": None}, {"fill": "NaN"}, {"shape": (5, 6)}, {"dims": ("a", None)},
])
def test_template_parse_equals_zarr_parse(variant):
    from zarr.core.metadata.v3 import ArrayV3Metadata

    parser = MetadataParser()
    parser.parse(doc("first"), 3)  # primes the template for the base structure
    d = doc("second", **variant)
    ours = parser.parse(json.loads(json.dumps(d)), 3)
    theirs = ArrayV3Metadata.from_dict(json.loads(json.dumps(d)))
    assert ours.to_dict() == theirs.to_dict()
    assert ours.attributes == {"long_name": "second", "units": "K"}


def test_wrong_number_of_dimension_names_is_not_templated():
    parser = MetadataParser()
    parser.parse(doc("first"), 3)
    with pytest.raises(ValueError, match="`dimension_names` and `shape` need to have the same number"):
        parser.parse(doc("odd", dims=("only_one",)), 3)  # left to zarr-python, which refuses it


def test_v2_documents():
    from zarr.core.metadata.v2 import ArrayV2Metadata

    base = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f8", "fill_value": None, "order": "C",
            "filters": None, "compressor": {"id": "zstd", "level": 1}, "dimension_separator": "."}
    parser = MetadataParser()
    parser.parse({**base, "attributes": {"_ARRAY_DIMENSIONS": ["x"]}}, 2)
    ours = parser.parse({**base, "attributes": {"_ARRAY_DIMENSIONS": ["y"], "units": "m"}}, 2)
    theirs = ArrayV2Metadata.from_dict({**base, "attributes": {"_ARRAY_DIMENSIONS": ["y"], "units": "m"}})
    assert ours.to_dict() == theirs.to_dict()
