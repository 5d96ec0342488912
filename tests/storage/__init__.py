"""Byte sources and sinks, every backend."""
