"""The xarray glue: whole Datasets, DataTree, async loading, open cost."""
