#!/usr/bin/env bash
# The documentation site: MkDocs (mkdocs.yml, docs/), built into build/site/ with warnings as errors (broken links
# and anchors, pages missing from the nav, docstrings the API reference cannot parse), then a check that every
# public name has an entry in the API reference. docs/dev/docs-site.md says how it is built and why MkDocs.
# Usage: bash ci/docs.sh [--serve]   (--serve: live preview on http://127.0.0.1:8000 instead of a build)
# Needs .venv (bash ci/setup.sh); installs the `docs` extra's tools into it when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
py=.venv/bin/python
[ -x "$py" ] || { echo "ci/docs.sh: no .venv; run bash ci/setup.sh first" >&2; exit 1; }
if ! "$py" -c 'import mkdocs, material, mkdocstrings, mkdocstrings_handlers.python' 2>/dev/null; then
  # the `docs` extra's requirements, read from setup.cfg (one place), without reinstalling the package
  mapfile -t reqs < <("$py" - <<'PY'
import configparser
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
print("\n".join(r for r in cfg["options.extras_require"]["docs"].split("\n") if r.strip()))
PY
)
  "$py" -m pip install --quiet "${reqs[@]}"
fi
export NO_MKDOCS_2_WARNING=1  # Material's banner about MkDocs 2.0, printed on every build
if [ "${1:-}" = "--serve" ]; then
  exec .venv/bin/mkdocs serve --strict
fi
.venv/bin/mkdocs build --strict --quiet --site-dir build/site || { echo "ci/docs.sh: the site build failed (warnings are errors)" >&2; exit 1; }
"$py" ci/docs_api_coverage.py || exit 1
echo "docs site built in $(( $(date +%s) - start )) s: build/site/index.html"
