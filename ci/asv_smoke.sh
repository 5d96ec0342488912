#!/usr/bin/env bash
# Smoke test of the asv suite (asv_bench/benchmarks/) in .venv (--python=same, nothing saved): `asv check`, then
# one quick run of the open benchmark, of the read benchmark (local directory and MinIO, one layout, both
# engines) and of one access-pattern operation (the access-pattern table's --quick field, one layout, both
# engines and stores). The suite imports the harness the table scripts share (asv_bench/shared/).
# Exits non-zero when a benchmark fails, or skips for want of MinIO/toxiproxy (ZARRMAX_ASV_STRICT=1).
# Usage (from anywhere): bash ci/asv_smoke.sh [extra asv run arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

if [ ! -x .venv/bin/python ]; then
  echo "ci/asv_smoke.sh: .venv not found: run \`bash ci/setup.sh test\` first" >&2
  exit 1
fi
if [ ! -x .venv/bin/asv ]; then
  .venv/bin/python -m pip install --quiet "asv>=0.6" virtualenv matplotlib
fi
bash ci/install_services.sh  # MinIO and toxiproxy for the benchmarks (cached in ~/go/bin)

export ZARRMAX_ASV_STRICT=1
start=$(date +%s)
cd asv_bench
"$root/.venv/bin/asv" machine --yes >/dev/null
"$root/.venv/bin/asv" check --python=same
# Parameterized benchmarks are selected on "name(param, ...)".
"$root/.venv/bin/asv" run --python=same --quick --show-stderr \
  --bench "OpenManyVariables\.time_open_dataset\('(zarr|zarrmax)', False, (0|20)\)" \
  --bench "ReadThroughput\.time_read\('(zarr|zarrmax)', 'int64, 1 MB chunks in 64 MB shards', '(local|minio)'\)" \
  --bench "AccessPatterns\.time_operation\('(zarr|zarrmax)', 'tiles in slab shards', 'map', '(local|minio)'\)" \
  "$@"
echo "ci/asv_smoke.sh: passed in $(( $(date +%s) - start )) s"
