#!/usr/bin/env bash
# The main job: opens the tutorial series in JupyterLab, on real data.
# Sets up .venv (torch==2.13.0 CPU build first, then the package with its notebook extras),
# then starts JupyterLab on notebooks/00_index.ipynb. It listens on localhost with Jupyter's
# token authentication on; on a headless machine, open the URL it prints (with the token).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh test
exec .venv/bin/jupyter lab --notebook-dir=notebooks --ServerApp.ip=127.0.0.1 \
  --LabApp.default_url=/lab/tree/00_index.ipynb "$@"
