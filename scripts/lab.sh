#!/usr/bin/env bash
# The main job: opens the tutorial series in JupyterLab, on real data.
# Sets up .venv (torch==2.13.0 CPU build first, then the package with its test extras, which
# hold the notebooks' and frameworks' and let the same .venv run the suite),
# then starts JupyterLab on notebooks/00_index.ipynb. It listens on localhost (127.0.0.1) with
# Jupyter's token authentication on; on a headless machine it opens no browser: open the URL it
# prints (it carries the token). Extra arguments go to `jupyter lab` (e.g. --port=8899).
# `bash scripts/lab.sh --print-args` prints JupyterLab's arguments, one a line, and does nothing
# else (tests/ui/test_tutorials_unchanged.py starts Lab with them).
set -euo pipefail
cd "$(dirname "$0")/.."
# Default settings from binder/lab-settings/overrides.json (the app settings dir; Binder copies
# the same file into its environment's, see binder/postBuild); your own settings still win:
# - no news prompt ("Would you like to get notified about official Jupyter news?": it asks
#   while fetchNews is "none", whatever news_url says) and no update check: the tutorials work
#   offline, and the prompt covers outputs;
# - no autosave: opening a notebook writes the running kernel's metadata (language_info, its
#   Python version) into the model, and autosave would write that into the tracked .ipynb.
#   Save your own work with Ctrl+S (File > Save).
args=(--notebook-dir=notebooks --ServerApp.ip=127.0.0.1
      --LabApp.default_url=/lab/tree/00_index.ipynb
      --LabApp.app_settings_dir=binder/lab-settings
      --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate)
if [ "${1:-}" = --print-args ]; then
  printf '%s\n' "${args[@]}"
  exit 0
fi
bash scripts/setup_env.sh test
if [ -z "${DISPLAY:-}" ] && [ "$(uname)" = Linux ]; then
  args+=(--no-browser)   # headless: print the URL instead of trying to open a browser
fi
if [ "$(id -u)" = 0 ]; then
  args+=(--allow-root)   # containers and CI machines often run as root
fi
exec .venv/bin/jupyter lab "${args[@]}" "$@"
