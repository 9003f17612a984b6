"""examples/train_ddp.py under torchrun (2 CPU ranks, gloo): its recorded shards, checked
independently of clorch_nb against torch.utils.data.DistributedSampler, and its accuracy.

The example is run once per module (about 10 s on 2 cores); every test reads that run.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from torch.utils.data import DistributedSampler

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_ddp.py"
EPOCHS, NPROC, SEED = 3, 2, 0
# measured: 0.92-0.97 final test accuracy for seeds 0-3; chance is 0.10
MIN_ACCURACY = 0.85
RUN_TIMEOUT_S = 240

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@dataclass(frozen=True)
class Run:
    stdout: str
    record: dict[str, Any]
    record_path: Path


def _clean_env() -> dict[str, str]:
    """This environment without any torch.distributed variables a parent launcher may have set."""
    drop = {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "GROUP_RANK",
        "ROLE_RANK",
        "TORCHELASTIC_RUN_ID",
    }
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _torchrun() -> list[str]:
    beside = Path(sys.executable).with_name("torchrun")
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "torch.distributed.run"]


def _run(cmd: list[str], record: Path) -> Run:
    """Run ``cmd`` in its own session; on timeout kill the whole session (torchrun and ranks)."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} timed out after {RUN_TIMEOUT_S}s\n{out}\n{err[-3000:]}")
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{out}\n{err[-3000:]}"
    return Run(out, json.loads(record.read_text()), record)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    record = tmp_path_factory.mktemp("ddp") / "shards.json"
    cmd = [
        *_torchrun(),
        "--standalone",
        f"--nproc_per_node={NPROC}",
        str(SCRIPT),
        "--epochs",
        str(EPOCHS),
        "--seed",
        str(SEED),
        "--record",
        str(record),
    ]
    return _run(cmd, record)


def torch_shard(size: int, num_replicas: int, rank: int, seed: int, epoch: int) -> list[int]:
    """The oracle: torch's own sampler with the same settings."""
    dataset: Any = range(size)  # torch only needs len()
    s: DistributedSampler[int] = DistributedSampler(
        dataset, num_replicas=num_replicas, rank=rank, seed=seed, shuffle=True, drop_last=False
    )
    s.set_epoch(epoch)
    return list(s)


def test_record_has_the_documented_format(ddp_run: Run) -> None:
    rec = ddp_run.record
    assert set(rec) == {"size", "num_replicas", "seed", "epochs"}
    assert rec["num_replicas"] == NPROC and rec["seed"] == SEED
    assert len(rec["epochs"]) == EPOCHS
    assert all(len(epoch) == NPROC for epoch in rec["epochs"])
    assert all(isinstance(i, int) for epoch in rec["epochs"] for shard in epoch for i in shard)


def test_each_epoch_covers_the_dataset_and_overlaps_only_by_padding(ddp_run: Run) -> None:
    n, r = ddp_run.record["size"], ddp_run.record["num_replicas"]
    padding = math.ceil(n / r) * r - n
    assert padding > 0, "pick a train size not divisible by the ranks, so padding is exercised"
    for e, shards in enumerate(ddp_run.record["epochs"]):
        counts = Counter(i for shard in shards for i in shard)
        assert set(counts) == set(range(n)), f"epoch {e}: shards do not cover range({n})"
        assert sum(c - 1 for c in counts.values()) == padding, f"epoch {e}: overlap != padding"
        assert all(len(s) == math.ceil(n / r) for s in shards), f"epoch {e}: uneven shards"


def test_each_rank_matches_torch_distributed_sampler(ddp_run: Run) -> None:
    rec = ddp_run.record
    for e, shards in enumerate(rec["epochs"]):
        for rank, shard in enumerate(shards):
            want = torch_shard(rec["size"], rec["num_replicas"], rank, rec["seed"], e)
            assert shard == want, f"epoch {e} rank {rank} differs from torch's DistributedSampler"


def test_set_epoch_gives_every_epoch_a_new_order(ddp_run: Run) -> None:
    epochs = ddp_run.record["epochs"]
    for a in range(len(epochs)):
        for b in range(a + 1, len(epochs)):
            assert epochs[a][0] != epochs[b][0], f"rank 0 has the same order in epochs {a} and {b}"


def test_prints_coverage_checks_and_a_sane_accuracy(ddp_run: Run) -> None:
    lines = [ln for ln in ddp_run.stdout.splitlines() if re.match(r"epoch \d+ shards:", ln)]
    assert len(lines) == EPOCHS, ddp_run.stdout
    assert all(ln.endswith("disjoint apart from padding") for ln in lines), ddp_run.stdout
    epoch_line = r"^epoch \d+: train loss ([\d.]+), test accuracy ([\d.]+) \((\d+)/(\d+)\)"
    per_epoch = re.findall(epoch_line, ddp_run.stdout, re.M)
    assert len(per_epoch) == EPOCHS, ddp_run.stdout
    assert len({total for *_, total in per_epoch}) == 1, "each epoch evaluates the whole test split"
    m = re.search(r"final test accuracy ([\d.]+)", ddp_run.stdout)
    assert m is not None, ddp_run.stdout
    assert float(m[1]) > MIN_ACCURACY, ddp_run.stdout
    assert float(per_epoch[-1][0]) < float(per_epoch[0][0]), "training loss should fall"


def test_no_stray_processes_remain(ddp_run: Run) -> None:
    marker = str(ddp_run.record_path)
    stray = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if marker in " ".join(p.info["cmdline"] or []):
            stray.append((p.info["pid"], p.info["cmdline"]))
    assert not stray, f"processes of the torchrun run are still alive: {stray}"


def test_runs_as_a_single_plain_process(tmp_path: Path) -> None:
    record = tmp_path / "one.json"
    run = _run([sys.executable, str(SCRIPT), "--epochs", "1", "--record", str(record)], record)
    rec = run.record
    assert rec["num_replicas"] == 1 and len(rec["epochs"]) == 1
    assert rec["epochs"][0] == [torch_shard(rec["size"], 1, 0, rec["seed"], 0)]
    assert "world size 1" in run.stdout
