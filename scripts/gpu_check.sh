#!/usr/bin/env bash
# The GPU check of issue 20, a few minutes on one CUDA machine: writes everything into OUTDIR.
#   1. the CUDA-marked tests (page-locked arena slots and ring buffers, device batches, no host
#      sync), the corruption test apart (fill, copy ahead, use under load, drop, reuse: no value
#      wrong), each with a JUnit XML and a log;
#   2. benchmarks/gpu_feed.py: host-to-device GB/s for 38.5 MB and 154 MB batches (pageable
#      .to(), pin_memory().to(), a pre-pinned buffer, our registered arena; alone and beside a
#      matmul loop on the default stream) and process workers at 1, 2, 4, 8, 14 against torch's
#      DataLoader (gpu_feed.json + gpu_feed.md);
#   3. summary.md: what ran, what passed, where the figures are.
# Usage: scripts/gpu_check.sh OUTDIR   (PYTHON=... to choose the interpreter; default .venv's,
# else python3; it needs a CUDA build of torch and this repository importable; QUICK=1 runs the
# benchmark on tiny sizes, a dry run of the script on any machine).
set -uo pipefail
OUT="${1:?usage: scripts/gpu_check.sh OUTDIR}"
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONHASHSEED=0
{
  echo "# GPU check ($(date -u +%FT%TZ))"
  "$PY" -c "import torch; print('torch', torch.__version__, '| cuda available:', torch.cuda.is_available(), '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'no device')"
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1 || true
} > "$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
status=0
step() {  # step NAME COMMAND...: run, log, note the exit status in the summary
  local name="$1"; shift
  echo "== $name"
  local t0=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 15 "$OUT/$name.log"
  echo "- $name: exit $rc, $((SECONDS - t0)) s (log: $name.log)" >> "$OUT/summary.md"
  [ $rc -eq 0 ] || status=1
}
PYTEST=("$PY" -m pytest -p no:cacheprovider -o addopts="" -rs -v)  # the ini sets timeout = 300
step cuda_tests "${PYTEST[@]}" -m cuda -k "not corruption" tests/system/test_cuda_*.py --junitxml "$OUT/cuda_tests.xml"
step corruption "${PYTEST[@]}" -m cuda -k corruption tests/system/test_cuda_*.py --junitxml "$OUT/corruption.xml"
step benchmark timeout 420 "$PY" -m benchmarks.gpu_feed --out "$OUT" ${QUICK:+--quick}
echo "- figures: gpu_feed.md, gpu_feed.json" >> "$OUT/summary.md"
cat "$OUT/summary.md"
[ -f "$OUT/gpu_feed.md" ] && cat "$OUT/gpu_feed.md"
exit $status
