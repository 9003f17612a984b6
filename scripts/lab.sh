#!/usr/bin/env bash
# The main job: opens the tutorial series in JupyterLab, on real data.
# Sets up .venv (torch==2.13.0 CPU build first, then the package with its test extras, which
# hold the notebooks' and frameworks' and let the same .venv run the suite),
# then starts JupyterLab on notebooks/00_index.ipynb. It listens on localhost (127.0.0.1) with
# Jupyter's token authentication on; on a headless machine it opens no browser: open the URL it
# prints (it carries the token). Extra arguments go to `jupyter lab` (e.g. --port=8899).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh test
# no news feed or update check: the tutorials work offline, and the news prompt covers outputs
args=(--notebook-dir=notebooks --ServerApp.ip=127.0.0.1
      --LabApp.default_url=/lab/tree/00_index.ipynb
      --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate)
if [ -z "${DISPLAY:-}" ] && [ "$(uname)" = Linux ]; then
  args+=(--no-browser)   # headless: print the URL instead of trying to open a browser
fi
if [ "$(id -u)" = 0 ]; then
  args+=(--allow-root)   # containers and CI machines often run as root
fi
exec .venv/bin/jupyter lab "${args[@]}" "$@"
