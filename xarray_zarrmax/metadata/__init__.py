"""Metadata: a Zarr group or a whole hierarchy read in the fewest round trips, v2 and v3, consolidated or live,
parsed and checked into `ArrayNode` and `GroupNode` values. No chunk data is read here.
"""

from xarray_zarrmax.metadata.hierarchy import ArrayNode, GroupNode, MetadataParser, load_group, parse_group_path
from xarray_zarrmax.metadata.tree import load_tree

__all__ = ["ArrayNode", "GroupNode", "MetadataParser", "load_group", "load_tree", "parse_group_path"]
