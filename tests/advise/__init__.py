"""The layout advisor."""
