#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv.
# torch==2.13.0 goes in first: it is the CPU build; an unpinned torch pulls a multi-GB CUDA build.
# Usage: bash scripts/setup_env.sh [EXTRAS]   (default extras: test, which includes the notebooks)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
python_bin="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
fi
stamp=".venv/.clorch_nb-installed-$extras"
want="$(cat pyproject.toml scripts/setup_env.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".[$extras]"
echo "$want" > "$stamp"
