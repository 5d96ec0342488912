"""Every public name has an entry in the built API reference (build/site/api/): run by ci/docs.sh after the build.

Public names: ``xarray_zarrmax.__all__`` and the ``__all__`` of every subpackage ("wing") and of
``xarray_zarrmax.errors``, ``xarray_zarrmax.config`` and ``xarray_zarrmax.tuning``'s upper-case numbers. A name
counts as documented when some page of the API reference has a heading anchored at it, under any of the paths it
can be reached by (``xarray_zarrmax.to_zarr`` or ``xarray_zarrmax.write.to_zarr``).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from pathlib import Path

import xarray_zarrmax

SITE = Path(__file__).resolve().parents[1] / "build" / "site" / "api"
#: Not objects with a docstring of their own: documented in the text around them.
EXEMPT = {"xarray_zarrmax.__version__", "xarray_zarrmax.tuning.MiB"}


def public_names() -> dict[str, object]:
    """Qualified name -> object, for every public name of the package's public modules."""
    names: dict[str, object] = {}
    modules = ["xarray_zarrmax", "xarray_zarrmax.errors", "xarray_zarrmax.config", "xarray_zarrmax.tuning"]
    modules += [f"xarray_zarrmax.{m.name}" for m in pkgutil.iter_modules(xarray_zarrmax.__path__) if m.ispkg]
    for name in modules:
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is None:  # errors, tuning: their public classes and numbers
            exported = [n for n, v in vars(module).items() if not n.startswith("_")
                        and getattr(v, "__module__", name) == name
                        and (isinstance(v, type) or n.isupper())]
        for attr in exported:
            names[f"{name}.{attr}"] = getattr(module, attr)
    return names


def main() -> int:
    if not SITE.is_dir():
        print(f"{SITE} not found: build the site first (bash ci/docs.sh)", file=sys.stderr)
        return 1
    anchors = set()
    for page in SITE.rglob("*.html"):
        anchors.update(re.findall(r'id="(xarray_zarrmax[\w.]*)"', page.read_text(encoding="utf-8")))
    names = public_names()
    missing = []
    for qualified, obj in sorted(names.items()):
        if qualified in EXEMPT or qualified in anchors:
            continue
        # the same object documented under another path (its defining module, or another re-export)
        short = qualified.rsplit(".", 1)[1]
        defining = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', short)}"
        same = {q for q, o in names.items() if o is obj} | {defining}
        if not same & anchors:
            missing.append(qualified)
    if missing:
        print(f"ci/docs_api_coverage.py: {len(missing)} public names have no entry in the API reference "
              "(docs/api/*.md):", file=sys.stderr)
        for name in missing:
            print(f"  {name}", file=sys.stderr)
        return 1
    print(f"API reference: all {len(names)} public names documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
