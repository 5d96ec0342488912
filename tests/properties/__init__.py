"""Cross-cutting properties run over every store kind: equivalence with zarr-python, coherence, faults,
security, hostile input, clusters."""
