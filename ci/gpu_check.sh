#!/usr/bin/env bash
# The one command for a machine with an NVIDIA GPU (issue 45): build .venv-gpu with the wheels that match the
# driver's CUDA major version, then run every GPU step with its own time limit (ci/gpu_check.py says which),
# keeping each step's log and a summary (summary.md, summary.json) in the output directory.
#
#   bash ci/gpu_check.sh [--out DIR]     on the GPU machine (DIR defaults to $OUT, else build/gpu_check)
#   bash ci/gpu_check.sh --dry-run       anywhere: the same steps on the NumPy stand-in, in .venv (CI runs it)
#
# Needs network access to the package registries only. Exits non-zero when the setup or any step failed; the
# summary says which, and is written after every step, so a run cut short keeps what it measured.
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
out="${OUT:-build/gpu_check}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --out) out="${2:?--out needs a directory}"; shift ;;
    --out=*) out="${1#--out=}" ;;
    *) echo "ci/gpu_check.sh: unknown argument '$1'; expected --dry-run or --out DIR" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"

# The CUDA major version the driver supports, from nvidia-smi's header ("CUDA Version: 12.8"): the wheels
# (cupy-cuda12x/13x, nvidia-nvcomp-cu12/13, dask-cuda[cu12/13]) must not be newer than the driver.
cuda_major() {
  sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -1
}

packages_for() {  # the extras and the extra packages for a CUDA major version
  case "$1" in
    12|13) echo "test,bench,distributed,gpu-cu$1 dask-cuda[cu$1] nvtx" ;;
    *) return 1 ;;
  esac
}

if [ "$dry" = 1 ]; then
  # What a GPU machine would install, from sample nvidia-smi headers: the detection cannot rot either.
  for sample in "| NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: 12.4 |" \
                "| NVIDIA-SMI 580.65.06  Driver Version: 580.65.06  CUDA Version: 13.0 |"; do
    major=$(echo "$sample" | cuda_major)
    pkgs=$(packages_for "$major") || { echo "ci/gpu_check.sh: no wheels for CUDA '$major'" >&2; exit 1; }
    echo "dry run: a driver reporting CUDA $major gets: $pkgs"
  done
  [ -x .venv/bin/python ] || bash ci/setup.sh test || exit 1
  exec .venv/bin/python ci/gpu_check.py --dry-run --out "$out"
fi

if ! command -v nvidia-smi >/dev/null; then
  echo "ci/gpu_check.sh: nvidia-smi not found: this machine has no NVIDIA driver (use --dry-run to check the script)" >&2
  exit 1
fi
major=$(nvidia-smi | cuda_major)
if ! pkgs=$(packages_for "$major"); then
  echo "ci/gpu_check.sh: the driver reports CUDA '$major'; expected 12 or 13 (cupy and nvCOMP publish wheels for those)" >&2
  exit 1
fi
read -r extras extra_packages <<<"$pkgs"
start=$(date +%s)
echo "gpu_check: building .venv-gpu for CUDA $major: .[$extras] $extra_packages (log $out/setup.log)"
status=passed
if ! timeout 240 env VENV=.venv-gpu EXTRA_PACKAGES="$extra_packages" bash ci/setup.sh "$extras" \
     >"$out/setup.log" 2>&1; then
  status=failed
fi
printf '{"status": "%s", "seconds": %d, "cuda_major": "%s", "packages": ".[%s] %s"}\n' \
  "$status" "$(( $(date +%s) - start ))" "$major" "$extras" "$extra_packages" >"$out/setup.json"
if [ "$status" != passed ]; then
  tail -n 30 "$out/setup.log" >&2
  echo "ci/gpu_check.sh: setting up .venv-gpu failed (log $out/setup.log)" >&2
  exit 1
fi
# What is left of the 8 minutes (issue 45) goes to the steps.
exec .venv-gpu/bin/python ci/gpu_check.py --out "$out" --budget $(( 480 - ($(date +%s) - start) ))
