"""Helpers shared by the test files (stores, hypothesis strategies, datasets)."""
