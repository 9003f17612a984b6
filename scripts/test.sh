#!/usr/bin/env bash
# Runs the whole test suite: unit and contract tests, doctests, the notebooks under strict nbval,
# and the real-browser tests (JupyterLab driven by headless Chromium).
# Sets up everything it needs: .venv with torch==2.13.0 and the package, and Debian's chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh test
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian's chromium for the browser tests..."
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "could not install chromium: browser tests will be skipped"
fi
export PYTHONHASHSEED=0 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# One pytest run: the package's doctests, tests/, and the tutorial series under strict nbval
# (stored outputs compared, kernel from this environment; tests/ui/conftest.py keeps its own
# notebooks, which the browser tests open, out of nbval's collection).
exec .venv/bin/python -m pytest clorch_nb tests notebooks \
  --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg "$@"
