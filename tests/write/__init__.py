"""Writes: to_zarr and the advised encoding."""
