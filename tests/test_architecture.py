"""The package keeps its shape: wings imported only downwards, no import circles, no module past the size limit,
every wing a subpackage whose ``__init__`` explains it and re-exports a sorted ``__all__``.

The figures come from ``ci/import_graph.py`` (``python ci/import_graph.py`` prints them for any checkout).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "ci" / "import_graph.py"
PACKAGE = ROOT / "xarray_zarrmax"


def figures(package: Path) -> tuple[int, dict[str, object]]:
    done = subprocess.run([sys.executable, str(SCRIPT), str(package), "--json", "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_package_keeps_its_layering() -> None:
    code, found = figures(PACKAGE)
    assert found["circles"] == []
    assert found["back_up"] == []
    assert found["against_wings"] == []
    assert found["over_max_lines"] == []
    assert code == 0


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "xarray_zarrmax" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "xarray_zarrmax"


def test_the_checker_sees_what_breaks_the_layering(tmp_path: Path) -> None:
    package = _write(tmp_path, {
        "__init__.py": "",
        "config.py": "",
        "core/__init__.py": "",
        "core/loop.py": "from xarray_zarrmax.config import x\n",
        "core/a.py": "def f():\n    from xarray_zarrmax.core import b\n",  # a lazy import of a module above it
        "core/b.py": "from xarray_zarrmax.core import a\n",
        "read/__init__.py": "",
        "read/fetch.py": "from xarray_zarrmax.core.loop import run\n",
        "storage/__init__.py": "",
        "storage/local.py": "def g():\n    from xarray_zarrmax.read import fetch\n",  # storage is below read
        "storage/big.py": "x = 1\n" * 601,
    })
    code, found = figures(package)
    assert code == 1
    assert found["circles"] == [["xarray_zarrmax.core.a", "xarray_zarrmax.core.b"]]
    assert found["back_up"] == ["xarray_zarrmax.core.a -> xarray_zarrmax.core.b"]
    assert found["against_wings"] == ["xarray_zarrmax.storage.local -> xarray_zarrmax.read.fetch"]
    assert found["over_max_lines"] == ["xarray_zarrmax.storage.big (601)"]
    assert found["floors"] == 3  # fetch on loop on config


def _isort_key(name: str) -> tuple[int, str]:
    """isort's order for ``__all__`` (ruff's RUF022): CONSTANTS, then Classes, then everything else."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def _wings() -> list[Path]:
    return sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("wing", _wings(), ids=lambda p: p.name)
def test_every_wing_explains_itself_and_exports_a_sorted_all(wing: Path) -> None:
    tree = ast.parse((wing / "__init__.py").read_text())
    doc = ast.get_docstring(tree)
    assert doc and len(doc.split()) >= 20, f"{wing.name}/__init__.py needs a docstring saying what the wing is for"
    exported = [node for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
    assert exported, f"{wing.name}/__init__.py has no __all__"
    names = ast.literal_eval(exported[0].value)
    assert names == sorted(names, key=_isort_key), f"{wing.name}.__all__ is not sorted (constants, classes, rest)"
    imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert set(names) <= imported, f"{wing.name}.__all__ names what it does not import: {set(names) - imported}"
