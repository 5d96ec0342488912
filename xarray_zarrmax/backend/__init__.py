from xarray_zarrmax.backend.entrypoint import ZarrmaxBackendEntrypoint

__all__ = ["ZarrmaxBackendEntrypoint"]
