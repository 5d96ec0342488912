"""Loading and parsing Zarr metadata."""
