#!/usr/bin/env bash
# The whole test suite on a fresh machine: .venv, MinIO/toxiproxy binaries, pytest against real services.
set -uo pipefail
cd "$(dirname "$0")/.."
# Hypothesis draws from this seed: rerun a failure with HYPOTHESIS_SEED=N bash ci/test.sh (or pytest --hypothesis-seed=N).
seed="${HYPOTHESIS_SEED:-$(( (RANDOM << 15) | RANDOM ))}"
case "$seed" in ''|*[!0-9]*) echo "ci/test.sh: HYPOTHESIS_SEED must be a non-negative integer. Got '$seed'." >&2; exit 1;; esac
echo "hypothesis seed: $seed"
# Where the time goes: each stage's seconds, printed at the end (also when a stage fails).
ci_start=$(date +%s)
stage_start=$ci_start
stages=""
mark() { local now; now=$(date +%s); stages="$stages  $1: $(( now - stage_start )) s"$'\n'; stage_start=$now; }
print_times() { printf "where the time went:\n%s  total: %s s\n" "$stages" "$(( $(date +%s) - ci_start ))"; }
trap '[ -n "${finished:-}" ] || print_times' EXIT
# The MinIO/toxiproxy build (Go: about 4 minutes when ~/go/bin holds no binaries) beside pip's install of .venv
services_log=$(mktemp)
bash ci/install_services.sh >"$services_log" 2>&1 &
services=$!
bash ci/setup.sh test,docs,release
setup_rc=$?
wait "$services"  # also when pip failed: no build left running behind the exit
services_rc=$?
cat "$services_log"
[ "$setup_rc" -eq 0 ] || exit "$setup_rc"
[ "$services_rc" -eq 0 ] || exit "$services_rc"
mark "setup (venv, MinIO/toxiproxy)"
start=$(date +%s)
.venv/bin/ruff check xarray_zarrmax tests asv_bench ci || exit 1
.venv/bin/mypy xarray_zarrmax || exit 1
# The package's shape (tests/test_architecture.py holds it) and what it uses of xarray beyond the public API
# (xarray_zarrmax/xarray_compat.py; exits 1 if the installed xarray changed any of it). Both fail here, in the
# first minute, not after the tests.
.venv/bin/python ci/import_graph.py --check || exit 1
.venv/bin/python -m xarray_zarrmax.xarray_compat || exit 1
mark "ruff, mypy, import graph, xarray_compat"
log=$(mktemp)
# Two worker processes (pytest-xdist), each with its own MinIO and toxiproxy: 1.9x on a 2-core machine
# (docs/dev/contributing.md). worksteal: a worker that runs out takes tests queued on the other, so no file of
# minutes holds up the end. PYTEST_WORKERS=0 runs every test in this process, one after another.
workers="${PYTEST_WORKERS:-2}"
case "$workers" in ''|*[!0-9]*) echo "ci/test.sh: PYTEST_WORKERS must be a non-negative integer. Got '$workers'." >&2; exit 1;; esac
.venv/bin/python -m pytest tests -n "$workers" --dist worksteal --hypothesis-seed="$seed" --durations=15 "$@" 2>&1 \
  | tee "$log"
rc=${PIPESTATUS[0]}
echo "test suite took $(( $(date +%s) - start )) s"
echo "hypothesis seed: $seed (rerun with HYPOTHESIS_SEED=$seed bash ci/test.sh)"  # also when it failed
if [ "$rc" -eq 5 ]; then
  echo "ci/test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi
mark "pytest"
[ "$rc" -eq 0 ] || exit "$rc"
# The documentation site (MkDocs, warnings as errors) and every public name in its API reference
# (docs/dev/docs-site.md); the pages' examples ran with pytest (tests/test_docs.py).
bash ci/docs.sh || exit 1
mark "docs site"
# The release: sdist and wheel, twine check --strict, the wheel in a fresh venv read from outside the checkout;
# __version__, the wheel and CHANGELOG.md agree (docs/dev/contributing.md#releases).
bash ci/release_check.sh || exit 1
mark "release check"
# The GPU check (ci/gpu_check.sh, run on a lent GPU) on the NumPy stand-in, so it cannot rot while none is lent.
bash ci/gpu_check.sh --dry-run --out build/gpu_check_dry >/dev/null || { cat build/gpu_check_dry/summary.md; exit 1; }
echo "gpu check dry run: every step passed (build/gpu_check_dry/summary.md)"
mark "gpu check dry run"
# Conformance (docs/dev/conformance.md): xarray's own Zarr tests, once with engine="zarr" (the control) and once with
# every read through engine="zarrmax"; fails on any difference tests/conformance/deliberate.toml does not declare.
conformance_log=$(mktemp)
.venv/bin/python -m tests.conformance.run 2>&1 | tee "$conformance_log"
conformance_rc=${PIPESTATUS[0]}
mark "conformance"
[ "$conformance_rc" -eq 0 ] || exit "$conformance_rc"
# The benchmark suite must stay runnable: asv check plus one open and one read benchmark.
bash ci/asv_smoke.sh || exit 1
mark "asv smoke"
# the conformance counts, then pytest's counts as the last line, after the benchmark smoke's output
summary=$(grep -E '^=+ .*(passed|failed).* in [0-9.]+s' "$log" | tail -1)
count() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' || echo 0; }
finished=1
print_times
echo "conformance (xarray's Zarr tests, build/conformance/):"
tail -n 4 "$conformance_log"
echo "tests: $(count passed) passed, $(count failed) failed, $(count skipped) skipped"
