"""The bottom wing: the I/O loop, request budget, buffers, geometry."""
