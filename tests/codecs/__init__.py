"""Encoding and decoding stored bytes."""
