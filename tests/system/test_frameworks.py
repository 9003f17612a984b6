"""clorch_nb's DataLoader inside the real frameworks (issue 30), 2 CPU ranks over gloo: each
script in framework_scripts/ (beside this file) runs as a user would run it and writes what every
rank got.

- Lightning ``strategy="ddp"``: Lightning rebuilds our loader with its ``DistributedSampler``
  (``isinstance`` of torch's DataLoader, torch's attributes): every item exactly once per epoch
  over the ranks, equal steps, epochs differ, and the loader that trained is ours.
- Lightning mid-epoch resume (a checkpoint at step 3): the resumed epoch is the rest of the
  uninterrupted one, batch for batch, on 1 and on 2 ranks.
- accelerate under torchrun: ``prepare()`` swaps in its ``DataLoaderShard`` (what it gives is
  checked); our loader kept with ``data.distributed_sampler``; ``skip_first_batches`` of both.
- A plain DDP script that forgets the sampler gets ``FullCopyPerRankWarning`` at its own line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "framework_scripts"
ROOT = Path(__file__).resolve().parents[2]
N, BATCH = 64, 4
OURS = "clorch_nb.data.loader.loader.DataLoader"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("MASTER_PORT", None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(args: list[str], out: Path, timeout: float = 240) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        args,
        env=_env(),
        cwd=out,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    ranks = sorted(out.glob("rank*.json"))
    return [json.loads(p.read_text()) for p in ranks]


def _lightning(out: Path, *extra: str) -> list[dict[str, Any]]:
    script = str(SCRIPTS / "lightning_ddp.py")
    return _run([sys.executable, script, str(out), *extra], out)


def _torchrun(script: str, out: Path, *extra: str) -> list[dict[str, Any]]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                f"--master_port={_free_port()}"]  # fmt: skip
    return _run([*torchrun, str(SCRIPTS / script), str(out), *extra], out)


def _items(ranks: list[dict[str, Any]], epoch: str) -> list[int]:
    return sorted(i for r in ranks for step in r["epochs"][epoch] for i in step)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_ddp_gives_each_item_once_per_epoch_over_the_ranks(
    tmp_path: Path, workers: int
) -> None:
    ranks = _lightning(tmp_path, "--devices", "2", "--workers", str(workers), "--epochs", "2")
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world"] for r in ranks} == {2}
    for r in ranks:  # our engine trained, sharded by the sampler Lightning injected
        assert r["cls"] == OURS and r["sampler"] == "DistributedSampler"
        assert r["backend"] == ("inline" if workers == 0 else "process")  # torch front: processes
        assert [len(r["epochs"][e]) for e in ("0", "1")] == [8, 8]  # equal steps
    for e in ("0", "1"):
        assert _items(ranks, e) == list(range(N))  # every item exactly once per epoch
    assert ranks[0]["epochs"]["0"] != ranks[0]["epochs"]["1"]  # set_epoch reached the sampler


@pytest.mark.timeout(400)
@pytest.mark.parametrize("devices", [1, 2])
def test_lightning_mid_epoch_resume_is_exact(tmp_path: Path, devices: int) -> None:
    common = ["--devices", str(devices), "--workers", "2", "--epochs", "1"]
    full = _lightning(tmp_path / "full", *common, "--save-every", "3")
    ckpt = tmp_path / "full" / "step=3.ckpt"
    assert ckpt.exists()
    resumed = _lightning(tmp_path / "resumed", *common, "--resume", str(ckpt))
    steps = N // BATCH // devices
    for before, after in zip(full, resumed, strict=True):
        assert len(before["epochs"]["0"]) == steps
        assert after["epochs"]["0"] == before["epochs"]["0"][3:]  # the rest, in its order
    assert _items(full, "0") == list(range(N))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_accelerate_under_torchrun(tmp_path: Path, workers: int) -> None:
    ranks = _torchrun("accelerate_ddp.py", tmp_path, "--workers", str(workers))
    assert [r["rank"] for r in ranks] == [0, 1]
    a, b = ranks
    # prepare() always builds its own DataLoaderShard from our torch attributes
    assert a["prepared"]["cls"] == "accelerate.data_loader.DataLoaderShard"
    for case in ("prepared", "ours"):
        for e in range(2):
            assert len(a[case]["epochs"][e]) == len(b[case]["epochs"][e]) == N // 2
            assert sorted(a[case]["epochs"][e] + b[case]["epochs"][e]) == list(range(N))
    # kept out of prepare(), our loader (and engine) runs, sharded by distributed_sampler
    assert a["ours"]["cls"] == OURS
    assert a["ours"]["backend"] == ("inline" if workers == 0 else "process")
    assert a["ours"]["epochs"][0] != a["ours"]["epochs"][1]
    # skip_first_batches: 2 batches of 4 fewer; of ours, exactly the rest of its epoch 0
    for r in ranks:
        assert len(r["skip_prepared"]["epochs"][0]) == N // 2 - 2 * BATCH
        assert r["skip_ours"]["epochs"][0] == r["ours"]["epochs"][0][2 * BATCH :]
    skipped = a["skip_prepared"]["epochs"][0] + b["skip_prepared"]["epochs"][0]
    assert len(set(skipped)) == len(skipped)  # still disjoint over the ranks


@pytest.mark.timeout(240)
def test_full_copy_per_rank_warning_in_a_real_two_rank_run(tmp_path: Path) -> None:
    ranks = _torchrun("ddp_warning.py", tmp_path)
    lines = (SCRIPTS / "ddp_warning.py").read_text().splitlines()
    forgot = 1 + next(i for i, t in enumerate(lines) if "the user's line (forgot)" in t)
    via_dataloader = 1 + next(i for i, t in enumerate(lines) if "line (dataloader)" in t)
    for r in ranks:
        assert [(w["file"], w["line"]) for w in r["forgot"]] == [("ddp_warning.py", forgot)]
        assert "world_size=2" in r["forgot"][0]["message"]
        assert "data.distributed_sampler(dataset)" in r["forgot"][0]["message"]
        assert [w["line"] for w in r["forgot_dataloader"]] == [via_dataloader]
        assert r["sharded"] == [] and r["on_purpose"] == []
