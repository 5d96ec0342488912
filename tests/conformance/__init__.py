"""The conformance run: xarray's own Zarr backend tests with every read through engine="zarrmax".

See docs/dev/conformance.md.
"""
