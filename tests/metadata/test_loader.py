"""One loader for a group alone (`load_group`, open_dataset) and for a subtree (`load_tree`, open_datatree): both
read the same group the same way, v2 and v3, consolidated or live; only the order of a group's arrays differs
(a group alone keeps the store's order, a tree lists them by name)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from xarray_zarrmax.core.loop import run_sync
from xarray_zarrmax.metadata import GroupNode, load_group, load_tree
from xarray_zarrmax.storage import resolve_source


def write_store(path: Path, zarr_format: int, consolidated: bool) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's "consolidated metadata is not part of the v3 spec" warning
        root = zarr.open_group(path, mode="w", zarr_format=zarr_format, attributes={"title": "root"})
        for group in (root, root.create_group("g", attributes={"title": "g"})):
            for name in ("w", "x", "a"):  # written out of order: the listing's or document's order is not the names'
                dims = {"dimension_names": ["x"]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["x"]}}
                group.create_array(name, shape=(3,), chunks=(2,), dtype="i4", **dims)[:] = np.arange(3)
        root["g"].create_group("h", attributes={"title": "h"})
        if consolidated:
            zarr.consolidate_metadata(path)
    return path


def summary(node: GroupNode) -> tuple[Any, ...]:
    return (node.path, node.zarr_format, node.attributes, node.unconsolidated,
            {name: (array.path, array.document) for name, array in node.arrays.items()})


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize(("written_consolidated", "consolidated"),
                         [(False, None), (False, False), (True, None), (True, True), (True, False)])
@pytest.mark.parametrize("group", [None, "g"])
def test_a_group_alone_and_in_its_tree_are_read_alike(tmp_path: Path, zarr_format: int, written_consolidated: bool,
                                                      consolidated: bool | None, group: str | None) -> None:
    source = resolve_source(str(write_store(tmp_path / "s.zarr", zarr_format, written_consolidated)))
    alone = run_sync(load_group(source, group, consolidated=consolidated))
    tree = run_sync(load_tree(source, group, consolidated=consolidated))
    path = group or ""
    assert list(tree)[0] == path
    assert summary(alone) == summary(tree[path])
    assert list(tree[path].arrays) == sorted(alone.arrays)  # a tree by name
    if written_consolidated and consolidated is not False:
        assert list(alone.arrays) == sorted(alone.arrays)  # zarr-python writes consolidated members sorted
    assert sorted(tree) == sorted({path, *(p for p in ("g", "g/h") if p.startswith(path))})


def test_on_array_sees_every_array_of_the_group_once(tmp_path: Path) -> None:
    source = resolve_source(str(write_store(tmp_path / "s.zarr", 3, consolidated=False)))
    seen: list[str] = []
    seen_in_tree: list[tuple[str, str]] = []

    async def on_array(node: Any) -> None:
        seen.append(node.name)

    async def on_tree_array(path: str, node: Any) -> None:
        seen_in_tree.append((path, node.name))

    run_sync(load_group(source, "g", on_array=on_array))
    run_sync(load_tree(source, on_array=on_tree_array))
    assert sorted(seen) == ["a", "w", "x"]
    assert sorted(seen_in_tree) == [(p, n) for p in ("", "g") for n in ("a", "w", "x")]
