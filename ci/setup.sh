#!/usr/bin/env bash
# Build .venv at the repo root with python3.12 and install the package with the given extras.
# Usage: bash ci/setup.sh [extras]   (default: test); VENV=.venv-gpu builds another venv
# and EXTRA_PACKAGES adds packages to the same install (ci/gpu_check.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
venv="${VENV:-.venv}"

find_python() {
  local c
  for c in "${PYTHON:-}" python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
    [ -n "$c" ] || continue
    if "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  py="$(find_python)" || { echo "ci/setup.sh: python3.12 not found (set PYTHON=/path/to/python3.12)" >&2; exit 1; }
  rm -rf "$venv"
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# setuptools warns about every editable install of a flat layout ("Editable installation... folders with the
# same name"): true of any package, and a wall of text opening the demo's output. That one warning only.
# EXTRA_PACKAGES (ci/gpu_check.sh: dask-cuda, nvtx) resolve in the same install as the package's own.
# shellcheck disable=SC2086
PYTHONWARNINGS="ignore:Editable installation:UserWarning" "$venv/bin/python" -m pip install --quiet -e ".[$extras]" \
  ${EXTRA_PACKAGES:-}
