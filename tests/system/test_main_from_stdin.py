"""A script read from standard input (``python - <<EOF``, guarded by ``if __name__ ==
"__main__":``) starts process workers, as torch's default (fork) loader runs it.

forkserver and spawn children re-run the parent's main script from ``__main__.__file__``; for
``<stdin>`` there is no such file, and every worker failed at start while the loader blamed a
missing guard. A main without a file is not re-run (:func:`clorch_nb.warm_start.
main_without_file`): its classes reach the workers by value.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import torch
from clorch_nb import data


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return i * i


if __name__ == "__main__":
    for context in ({CONTEXTS}):
        kw = {{}} if context is None else {{"multiprocessing_context": context}}
        torch_front = data.DataLoader(Squares(), batch_size=2, num_workers=2, **kw)
        ours = data.dataloader(Squares(), batch_size=2, num_workers=2, shuffle=False,
                               worker_backend="process")
        print([b.tolist() for b in torch_front], [list(b) for b in ours],
              torch_front.worker_backend, ours.worker_backend)
"""


def _run(args: list[str], script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *args], input=script, capture_output=True, text=True, timeout=240,
        cwd=tmp_path, env=env,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_from_stdin_starts_process_workers(tmp_path: Path) -> None:
    """``python - <<EOF``: forkserver (default) and spawn workers (torch's front; ``dataloader()``
    has no start-method option), both fronts; the oracle is
    torch's own loader run the same way (its fork workers)."""
    out = _run(["-"], SCRIPT.format(CONTEXTS='None, "spawn"'), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    expected = "[[0, 1], [4, 9], [16, 25]] [[0, 1], [4, 9], [16, 25]] process process"
    assert out.stdout.splitlines() == [expected, expected]
    assert "FileNotFoundError" not in out.stderr and "<stdin>" not in out.stderr
    oracle = (
        "import torch\n"
        "class Squares(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 6\n"
        "    def __getitem__(self, i): return i * i\n"
        "if __name__ == '__main__':\n"
        "    print([b.tolist() for b in torch.utils.data.DataLoader(Squares(), batch_size=2,"
        " num_workers=2)])\n"
    )
    torch_out = _run(["-"], oracle, tmp_path)
    assert torch_out.returncode == 0, torch_out.stderr[-2000:]
    assert torch_out.stdout.strip() == "[[0, 1], [4, 9], [16, 25]]"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_given_with_c_starts_process_workers(tmp_path: Path) -> None:
    """``python -c``: ``__main__`` has no file at all; workers start and deliver."""
    code = SCRIPT.format(CONTEXTS="None,")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    expected = "[[0, 1], [4, 9], [16, 25]] [[0, 1], [4, 9], [16, 25]] process process"
    assert out.stdout.splitlines() == [expected]
