#!/usr/bin/env bash
# The main job on a fresh machine: build .venv, write a local sharded dataset, read it with both engines.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh test
.venv/bin/python -m xarray_zarrmax.demo "$@"
