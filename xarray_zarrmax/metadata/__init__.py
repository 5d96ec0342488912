"""Metadata: what a Zarr group holds, read in the fewest round trips, v2 and v3, consolidated or live, parsed
and checked into `ArrayNode` and `GroupNode` values. No chunk data is read here.

- `nodes`: the values (`ArrayNode`, `GroupNode`) and the parsing and checks of each metadata document
  (`MetadataParser`: zarr-python's parse, once per distinct array structure; `parse_group_path`).
- `consolidated`: consolidated metadata taken apart (a v3 group's ``consolidated_metadata``, a v2 root's
  ``.zmetadata``), every member checked.
- `loader`: the one loader: `load_group` (one group, for ``open_dataset``) and `load_tree` (a group and every
  group below it, for ``open_datatree`` and ``open_groups``), both over `HierarchyLoader`.

A shard read starts here: the backend opens a group with `load_group`, and each `ArrayNode`'s document is what
`xarray_zarrmax.read.plan` plans the shard reads from.
"""

from xarray_zarrmax.metadata.loader import load_group, load_tree
from xarray_zarrmax.metadata.nodes import ArrayNode, GroupNode, MetadataParser, parse_group_path

__all__ = ["ArrayNode", "GroupNode", "MetadataParser", "load_group", "load_tree", "parse_group_path"]
