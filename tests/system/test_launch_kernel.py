"""Ranks launched from a real Jupyter kernel (jupyter_client), as a notebook cell launches them:
the live view's shards are torch's; a kernel interrupt (Ctrl-C, the notebook's stop button)
during the run leaves no process, port or /dev/shm entry and the next launch in the same kernel
works; an exception in rank 1 surfaces in the cell naming rank 1; the per-step data wait's worst
rank and stage are shown live in the cell while the ranks run."""

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


def _live_texts(messages: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], int]:
    """The texts the cell's live view showed, in order (each HTML widget ``value`` its kernel
    sent, and each display's ``text/plain``), and how many came before the cell's output was
    replaced by the final static form (the first ``update_display_data``)."""
    texts, before_final = [], None
    for kind, content in messages:
        if kind == "comm_msg":
            value = content.get("data", {}).get("state", {}).get("value")
            if isinstance(value, str):
                texts.append(value)
        elif kind in ("display_data", "update_display_data"):
            if kind == "update_display_data" and before_final is None:
                before_final = len(texts)
            texts.append(content["data"].get("text/plain", ""))
    return texts, len(texts) if before_final is None else before_final


@pytest.mark.timeout(120)
def test_worst_rank_and_stage_shown_live_in_a_kernel_cell(jupyter_kernel: Any) -> None:
    """Issue 44's Done-when: a cell launches 2 ranks, rank 1 slow in fetch (4 ms an item); while
    they run, the cell's live view (its widgets' updates, read off the kernel's iopub channel)
    says the worst rank per step is rank 1 and its wait mostly fetch, at least once before the
    ranks are done; the final static text says the same."""
    _, kc = jupyter_kernel
    out = run_cell(
        kc,
        "import json\n"
        "from clorch_nb import widgets\n"
        "from tests.launch_fixtures import slow_fetch_on\n"
        "view = widgets.launch(slow_fetch_on, 2, args=(1,), kwargs={'steps': 150},\n"
        "                      refresh_s=0.3, timeout_s=60)\n"
        "r = view.result\n"
        "print(json.dumps([r.results, list(r.pids.values()), r.port]))\n",
        90,
    )
    assert out["error"] is None, out["error"]
    results, pids, port = json.loads(out["stdout"].strip().splitlines()[-1])
    assert results == [150, 150]
    assert leftovers(pids, port) == []
    texts, before_final = _live_texts(out["messages"])
    live = [
        t
        for t in texts[:before_final]
        if "worst rank per step: rank 1" in t
        and "mostly fetch" in t
        and "(running)" in t  # a rank still running: drawn while the run was in progress
    ]
    assert live, [t[-400:] for t in texts[:before_final]]
    final = out["data"][-1]["text/plain"]
    assert "worst rank per step: rank 1" in final and "mostly fetch" in final
