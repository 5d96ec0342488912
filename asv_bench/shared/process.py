"""A function of the harness run once in a fresh Python process, for what only a fresh process measures: the
peak resident memory of one read or write (VmHWM starts afresh at exec, unlike ``ru_maxrss``, which a child
inherits from its parent at fork), or a read by another source tree of xarray_zarrmax.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

#: The repository root, which holds the `asv_bench` package.
ROOT = Path(__file__).resolve().parents[2]

# The child finds `asv_bench` at the end of sys.path: an xarray_zarrmax installed in the interpreter's
# environment (asv's, built from another commit) still comes before the working tree's.
_CHILD = """
import json, sys, warnings
warnings.filterwarnings("ignore")
first, root, module, function, args = json.loads(sys.argv[1])
if first:
    sys.path.insert(0, first)
sys.path.append(root)
import importlib
print(json.dumps(getattr(importlib.import_module(module), function)(*args)))
"""


def in_fresh_process(function: str, *args: Any, first_on_path: str | None = None, cwd: str | None = None) -> Any:
    """``function`` ("module:name", a function of the harness taking and returning JSON values) called with
    ``args`` in a new interpreter; its return value. ``first_on_path``: a source tree whose xarray_zarrmax the
    child imports instead of the installed one."""
    module, _, name = function.partition(":")
    spec = json.dumps([first_on_path, str(ROOT), module, name, list(args)])
    out = subprocess.run([sys.executable, "-c", _CHILD, spec], capture_output=True, text=True, check=True,
                         cwd=cwd).stdout
    return json.loads(out.strip().splitlines()[-1])


def vm_status(field: str) -> int:
    """A memory field of /proc/self/status (``VmRSS``, ``VmHWM``), in bytes (Linux only)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")
