"""The one compiled part, and optional: the layout search's costliest bounds (xarray_zarrmax/advise/_kernels.c).
Where it cannot be built (no C compiler) the package installs without it and the search uses the same counts in
numpy (``xarray_zarrmax.advise.kernels.in_use()`` says which). Everything else is in setup.cfg."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("xarray_zarrmax.advise._kernels", ["xarray_zarrmax/advise/_kernels.c"], optional=True)])
