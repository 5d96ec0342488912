#!/usr/bin/env bash
# The release check: what a user gets from `pip install xarray_zarrmax` works, and says which release it is.
#
#   1. sdist and wheel built as a release is (`python -m build`: the wheel is built from the sdist, each in an
#      isolated environment), then `twine check --strict` (metadata, README rendering);
#   2. the wheel holds the package alone (no tests/, asv_bench/, docs/, ci/), with its compiled part (setup.py);
#   3. the wheel installed, not editable, with its dependencies from the index, into a fresh venv, and run from
#      a folder outside the checkout: a small Zarr store read with engine="zarrmax" equals engine="zarr",
#      `zarrmax --help` and `zarrmax info STORE` succeed;
#   4. the version the package reports, the wheel's and CHANGELOG.md's top entry agree.
#
# Usage: bash ci/release_check.sh [--keep]   (--keep leaves the temporary folder, and says where)
# Needs .venv (bash ci/setup.sh); installs the `release` extra's tools (build, twine) into it when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
start=$(date +%s)
keep=0
[ "${1:-}" = "--keep" ] && keep=1

py=.venv/bin/python
[ -x "$py" ] || { echo "ci/release_check.sh: no .venv; run bash ci/setup.sh first" >&2; exit 1; }
if ! "$py" -c 'import build, twine' 2>/dev/null; then
  # the `release` extra's requirements, read from setup.cfg (one place), without reinstalling the package
  mapfile -t reqs < <("$py" - <<'EOF'
import configparser
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
print("\n".join(r for r in cfg["options.extras_require"]["release"].split("\n") if r.strip()))
EOF
)
  "$py" -m pip install --quiet "${reqs[@]}"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/zarrmax-release.XXXXXX")
if [ "$keep" -eq 1 ]; then
  trap 'echo "ci/release_check.sh: kept $tmp"' EXIT
else
  trap 'rm -rf "$tmp"' EXIT
fi
step() { echo "release check: $* ($(( $(date +%s) - start )) s)"; }

# 1. build, twine check
step "building sdist and wheel"
"$py" -m build --outdir "$tmp/dist" . >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
wheels=("$tmp"/dist/*.whl)
sdists=("$tmp"/dist/*.tar.gz)
[ "${#wheels[@]}" -eq 1 ] && [ -f "${wheels[0]}" ] && [ "${#sdists[@]}" -eq 1 ] && [ -f "${sdists[0]}" ] \
  || { echo "ci/release_check.sh: expected one wheel and one sdist in $tmp/dist" >&2; ls "$tmp/dist" >&2; exit 1; }
wheel=${wheels[0]}
"$py" -m twine check --strict "$tmp"/dist/* || exit 1

# 2. the wheel holds the package only; 4. the three versions
"$py" - "$wheel" "$repo/CHANGELOG.md" <<'EOF' || exit 1
import re
import sys
import zipfile

wheel, changelog = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(wheel).namelist()
tops = {n.split("/")[0] for n in names}
package = {t for t in tops if not t.endswith(".dist-info")}
if package != {"xarray_zarrmax"}:
    sys.exit(f"ci/release_check.sh: the wheel must hold the package alone; it holds {sorted(package)}")
if not any(n == "xarray_zarrmax/py.typed" for n in names):
    sys.exit("ci/release_check.sh: the wheel lacks xarray_zarrmax/py.typed")
wheel_version = wheel.rsplit("/", 1)[-1].split("-")[1]
top = next((m.group(1) for line in open(changelog, encoding="utf-8")
            if (m := re.match(r"^## \[?(\d+\.\d+\.\d+[^\] ]*)", line))), None)
if top != wheel_version:
    sys.exit(f"ci/release_check.sh: CHANGELOG.md's top entry is {top}, the wheel's version {wheel_version}")
print(f"wheel {wheel.rsplit('/', 1)[-1]}: {len(names)} files, package only; CHANGELOG.md top entry {top}")
EOF

# 3. a fresh venv, the wheel with its dependencies from the index, run from outside the checkout
step "installing the wheel into a fresh venv"
base=$("$py" -c 'import sys; print(sys._base_executable)')
"$base" -m venv "$tmp/venv"
# --no-compile: no bytecode for the whole dependency tree up front (half the install time); pip's cache serves
# the dependencies' wheels after the first run
"$tmp/venv/bin/python" -m pip install --quiet --no-compile "$wheel" >"$tmp/pip.log" 2>&1 \
  || { cat "$tmp/pip.log"; exit 1; }
step "smoke read from $tmp/run"
mkdir "$tmp/run"
cd "$tmp/run"   # not the checkout: `import xarray_zarrmax` must find the installed wheel
export ZARRMAX_RELEASE_CHECK_REPO="$repo"
"$tmp/venv/bin/python" - "$wheel" <<'EOF' || exit 1
import importlib.metadata
import os
import sys
import warnings

import numpy as np
import xarray as xr
import zarr

import xarray_zarrmax

repo = os.environ["ZARRMAX_RELEASE_CHECK_REPO"]
where = os.path.realpath(xarray_zarrmax.__file__)
if where.startswith(os.path.realpath(repo) + os.sep) or "site-packages" not in where:
    sys.exit(f"imported xarray_zarrmax from {where}, not from the installed wheel")
wheel_version = sys.argv[1].rsplit("/", 1)[-1].split("-")[1]
versions = {"xarray_zarrmax.__version__": xarray_zarrmax.__version__,
            "installed distribution": importlib.metadata.version("xarray_zarrmax"), "wheel file": wheel_version}
if len(set(versions.values())) != 1:
    sys.exit(f"versions disagree: {versions}")
if "zarrmax" not in xr.backends.list_engines():
    sys.exit(f"engine 'zarrmax' not registered with xarray; engines: {sorted(xr.backends.list_engines())}")
# the one compiled part (setup.py): a release's wheel holds it, or the layout search runs its numpy forms
from xarray_zarrmax.advise import kernels

if kernels.in_use() != "C":
    sys.exit("the wheel lacks the compiled kernels (xarray_zarrmax/advise/_kernels.c): the layout search would use "
             "their numpy forms, several times slower")

# a small store: a sharded zstd variable, an unsharded one, coordinates and attributes
rng = np.random.default_rng(0)
ds = xr.Dataset(
    {"t": (("time", "y", "x"), rng.standard_normal((8, 12, 10)).astype("float32"), {"units": "K"}),
     "mask": (("y", "x"), rng.integers(0, 2, (12, 10)).astype("uint8"))},
    coords={"time": np.arange(8), "y": np.linspace(0, 1, 12), "x": np.arange(10.0)},
    attrs={"title": "release check"})
codecs = [zarr.codecs.BytesCodec(), zarr.codecs.ZstdCodec()]
warnings.filterwarnings("ignore", "Consolidated metadata is currently not part", UserWarning)
ds.to_zarr("smoke.zarr", zarr_format=3, consolidated=True,
           encoding={"t": {"chunks": (2, 6, 5), "shards": (4, 12, 10), "compressors": codecs[1:]}})
for chunks in (None, {}):
    ours = xr.open_dataset("smoke.zarr", engine="zarrmax", chunks=chunks)
    theirs = xr.open_dataset("smoke.zarr", engine="zarr", chunks=chunks)
    xr.testing.assert_identical(ours.load(), theirs.load())
print(f"xarray_zarrmax {xarray_zarrmax.__version__} from {where}: engine='zarrmax' reads what engine='zarr' reads")
EOF
"$tmp/venv/bin/zarrmax" --help >"$tmp/help.txt" || { cat "$tmp/help.txt"; exit 1; }
grep -q "info" "$tmp/help.txt" || { echo "zarrmax --help does not name 'info'" >&2; cat "$tmp/help.txt"; exit 1; }
"$tmp/venv/bin/zarrmax" info smoke.zarr >"$tmp/info.txt" 2>&1 || { cat "$tmp/info.txt"; exit 1; }
grep -qw "mask" "$tmp/info.txt" || { echo "zarrmax info does not name variable 'mask'" >&2; cat "$tmp/info.txt"; exit 1; }
cd "$repo"
step "passed: $(basename "$wheel") builds, passes twine check --strict, installs and reads"
