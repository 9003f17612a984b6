"""Ranks launched from a real Jupyter kernel (jupyter_client), as a notebook cell launches them:
the live view's shards are torch's; a kernel interrupt (Ctrl-C, the notebook's stop button)
during the run leaves no process, port or /dev/shm entry and the next launch in the same kernel
works; an exception in rank 1 surfaces in the cell naming rank 1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kernel_cells import run_cell
from tests.launch_checks import leftovers

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Replaces the suite's leak check here: the module's kernel keeps its forkserver and
    resource tracker (Python's helpers, one per interpreter) between tests. What the ranks leave
    is checked by each test itself (``leftovers``), and the kernel is shut down at the end."""
    yield


@pytest.mark.timeout(240)
def test_shard_view_of_a_kernel_launch_is_torch_s(jupyter_kernel: Any) -> None:
    _, kc = jupyter_kernel
    out = run_cell(
        kc,
        "import json, torch\n"
        "from clorch_nb import widgets\n"
        "from tests.launch_fixtures import read_shards\n"
        "view = widgets.launch(read_shards, 2, kwargs={'epochs': 2})\n"
        "table = view.shard_table()\n"
        "print(json.dumps({'records': view.report.records(), 'results': view.result.results,\n"
        "                  'checks': [e.check_line() for e in table.epochs]}))\n",
        180,
    )
    assert out["error"] is None, out["error"]
    got = json.loads(out["stdout"].strip().splitlines()[-1])
    import torch

    def shard(rank: int, epoch: int) -> list[int]:
        s = torch.utils.data.DistributedSampler(range(1797), num_replicas=2, rank=rank, seed=3)
        s.set_epoch(epoch)
        return list(s)

    assert got["records"] == [[shard(r, e) for r in range(2)] for e in range(2)]
    assert got["results"] == [1798, 1798]
    assert all("disjoint" in c for c in got["checks"])
    # the cell's output ends as the static form: text + PNG of the shards and ranks
    final = out["data"][-1]
    assert "image/png" in final and "equal steps: every rank took 9 steps" in final["text/plain"]


@pytest.mark.timeout(300)
def test_interrupt_stops_every_rank_and_the_cell_runs_again(jupyter_kernel: Any) -> None:
    km, kc = jupyter_kernel
    code = (
        "import clorch_nb.launch as launching\n"
        "from tests.launch_fixtures import forever\n"
        "def say(m):\n"
        "    if m.kind == 'started' or (m.kind == 'batch' and m.event[1] == 0):\n"
        "        print(m.kind, m.rank, *(m.payload or ()), flush=True)\n"
        "launching.launch(forever, 2, on_message=say)\n"
    )
    interrupted = [False]

    def interrupt_once_running(text: str) -> None:
        if not interrupted[0] and text.count("batch ") >= 2:  # both ranks deliver batches
            interrupted[0] = True
            km.interrupt_kernel()

    out = run_cell(kc, code, 240, on_output=interrupt_once_running)
    assert interrupted[0], out["stdout"]
    assert out["error"] is not None and out["error"][0] == "KeyboardInterrupt", out["error"]
    started = [line.split() for line in out["stdout"].splitlines() if line.startswith("started")]
    pids, port = [int(s[2]) for s in started], int(started[0][3])
    assert len(pids) == 2
    assert leftovers(pids, port) == []
    again = run_cell(
        kc,
        "from tests.launch_fixtures import read_shards\n"
        "print(launching.launch(read_shards, 2, kwargs={'epochs': 1}).results)\n",
        120,
    )
    assert again["error"] is None and again["stdout"].strip() == "[899, 899]"


@pytest.mark.timeout(240)
def test_an_exception_in_rank_1_surfaces_in_the_cell(jupyter_kernel: Any) -> None:
    _, kc = jupyter_kernel
    out = run_cell(
        kc,
        "from clorch_nb import widgets\n"
        "from tests.launch_fixtures import fail_on\n"
        "widgets.launch(fail_on, 2, args=(1,))\n",
        180,
    )
    assert out["error"] is not None
    ename, evalue, tb = out["error"]
    assert ename == "RankError"
    assert evalue.startswith("rank 1 failed: KeyError: 'no label for batch 1 on rank 1'")
    assert "--- traceback in rank 1 ---" in evalue
