"""examples/train_ddp.py checkpoints and resumes under torchrun (issue 11): 2 ranks stop
mid-epoch; the run resumes on 3 ranks, on 1 rank, and on 2 torchrun "nodes" (``--nnodes=2``,
c10d rendezvous on 127.0.0.1, one process each, so ranks come from the global ``RANK``). From
the recorded shards: the interrupted epoch trained on every item exactly once (padding aside)
and later epochs are torch's shards for the new world size.

Four short runs (a few seconds each on 2 cores), shared by the tests through a module fixture.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.system.test_train_ddp import (
    RUN_TIMEOUT_S,
    SCRIPT,
    Run,
    _clean_env,
    _run,
    _torchrun,
    torch_shard,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EPOCHS, SEED, BATCH = 3, 0, 32
STOP = 33  # 2 ranks x 719 items: 23 batches per epoch, so step 33 is batch 10 of epoch 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _two_nodes(args: list[str], record: Path) -> Run:
    """Two torchrun "nodes" on this machine, one process each, meeting at a c10d rendezvous."""
    port = _free_port()
    cmd = [
        *_torchrun(),
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=clorch-resume",
        str(SCRIPT),
        *args,
    ]
    procs = [
        subprocess.Popen(
            cmd,
            cwd=SCRIPT.parents[1],
            env=_clean_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=RUN_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            pytest.fail(f"two-node run timed out: {' '.join(cmd)}")
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}\n{out}\n{err[-3000:]}"
    return Run("".join(o for o, _ in outs), json.loads(record.read_text()), record)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    d = tmp_path_factory.mktemp("resume")
    ckpt = d / "ckpt.pt"
    common = ["--epochs", str(EPOCHS), "--seed", str(SEED), "--batch-size", str(BATCH)]
    out = {
        "stop": _run(
            [
                *_torchrun(),
                "--standalone",
                "--nproc_per_node=2",
                str(SCRIPT),
                *common,
                "--checkpoint",
                str(ckpt),
                "--checkpoint-every",
                "10",
                "--stop-after",
                str(STOP),
                "--record",
                str(d / "stop.json"),
            ],
            d / "stop.json",
        )
    }
    resume = [*common, "--checkpoint", str(ckpt), "--resume"]
    out["3"] = _run(
        [
            *_torchrun(),
            "--standalone",
            "--nproc_per_node=3",
            str(SCRIPT),
            *resume,
            "--record",
            str(d / "r3.json"),
        ],
        d / "r3.json",
    )
    out["1"] = _run(
        [sys.executable, str(SCRIPT), *resume, "--record", str(d / "r1.json")], d / "r1.json"
    )
    out["nodes"] = _two_nodes([*resume, "--record", str(d / "nodes.json")], d / "nodes.json")
    return out


def test_the_stopped_run_records_its_partial_epoch(runs: dict[str, Run]) -> None:
    rec = runs["stop"].record
    assert rec["num_replicas"] == 2 and len(rec["epochs"]) == 1
    assert rec["partial"]["epoch"] == 1
    per_batch = math.ceil(rec["size"] / 2)
    k = STOP - math.ceil(per_batch / BATCH)  # batches of epoch 1 before the stop
    for r, shard in enumerate(rec["partial"]["shards"]):
        assert shard == torch_shard(rec["size"], 2, r, SEED, 1)[: k * BATCH]
    assert "stopped at epoch 1, step 33" in runs["stop"].stdout


@pytest.mark.parametrize("which", ["3", "1", "nodes"])
def test_the_interrupted_epoch_sees_every_item_exactly_once(
    runs: dict[str, Run], which: str
) -> None:
    before = runs["stop"].record
    after = runs[which].record
    n, w, w2 = before["size"], before["num_replicas"], after["num_replicas"]
    assert w2 == {"3": 3, "1": 1, "nodes": 2}[which]
    assert after["first_epoch"] == 1 and len(after["epochs"]) == EPOCHS - 1
    assert f"resumed at epoch 1, step {STOP}, on {w2} ranks" in runs[which].stdout
    rest = after["epochs"][0]
    assert len({len(s) for s in rest}) == 1, "lock-step: the same batch count on every rank"
    seen = Counter(i for shard in before["partial"]["shards"] + rest for i in shard)
    assert set(seen) == set(range(n)), "some item of the interrupted epoch was never trained on"
    repeats = sum(seen.values()) - n
    assert repeats <= (w - 1) + (w2 - 1), f"{repeats} repeats: more than padding"
    if w2 == w:  # same world size (the two-node run): each rank finishes its own torch shard
        for r in range(w):
            assert before["partial"]["shards"][r] + rest[r] == torch_shard(n, w, r, SEED, 1)


@pytest.mark.parametrize("which", ["3", "1", "nodes"])
def test_epochs_after_the_resume_are_torch_shards_for_the_new_world(
    runs: dict[str, Run], which: str
) -> None:
    rec = runs[which].record
    n, w2 = rec["size"], rec["num_replicas"]
    for r, shard in enumerate(rec["epochs"][1]):
        assert shard == torch_shard(n, w2, r, SEED, 2), f"epoch 2 rank {r} of {w2}"
    assert "shard checks passed" in runs[which].stdout


def test_two_nodes_had_distinct_global_ranks(runs: dict[str, Run]) -> None:
    shards: list[Any] = runs["nodes"].record["epochs"][1]
    assert len(shards) == 2 and shards[0] != shards[1]
