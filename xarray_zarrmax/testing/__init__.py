"""What tests and benchmarks share, ours and our users': real services on loopback (MinIO, toxiproxy),
example groups and trees, and a zarr Store wrapper counting what zarr-python requests.

Imports nothing of the reading or writing wings, so a test helper never changes what is tested.
"""

from xarray_zarrmax.testing.services import (
    ACCESS_KEY,
    SECRET_KEY,
    MinioServer,
    Toxiproxy,
    free_port,
    minio_binary,
    toxiproxy_binaries,
)
from xarray_zarrmax.testing.stores import TREE_GROUPS, counting_store, write_group_tree, write_many_variable_group

__all__ = [
    "ACCESS_KEY",
    "SECRET_KEY",
    "TREE_GROUPS",
    "MinioServer",
    "Toxiproxy",
    "counting_store",
    "free_port",
    "minio_binary",
    "toxiproxy_binaries",
    "write_group_tree",
    "write_many_variable_group",
]
