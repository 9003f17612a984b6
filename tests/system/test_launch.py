"""Several ranks from one call: a real gloo process group whose ranks' shards (streamed back by
``watch``) are torch's; a failing or dying rank is named and stops the others; a timeout stops
every rank; nothing is left behind (processes, port, /dev/shm)."""

from __future__ import annotations

import pytest
import torch

import clorch_nb.launch as launching
from clorch_nb.errors import ConfigError, RankError
from tests import launch_fixtures
from tests.launch_checks import leftovers


def _torch_shard(size: int, world_size: int, rank: int, seed: int, epoch: int) -> list[int]:
    s = torch.utils.data.DistributedSampler(range(size), num_replicas=world_size, rank=rank,
                                            seed=seed)  # fmt: skip
    s.set_epoch(epoch)
    return list(s)


@pytest.mark.timeout(120)
def test_ranks_read_torch_s_shards_and_return_in_rank_order() -> None:
    result = launching.launch(launch_fixtures.read_shards, 2, kwargs={"epochs": 2})
    assert result.results == [2 * 899, 2 * 899]  # 2 epochs of 1797 items, 1 padding repeat
    records = result.records()
    assert records == [[_torch_shard(1797, 2, r, 3, e) for r in range(2)] for e in range(2)]
    assert sorted(result.pids) == [0, 1]
    assert leftovers(result.pids.values(), result.port) == []


@pytest.mark.timeout(120)
def test_an_exception_in_rank_1_names_rank_1_and_stops_the_others() -> None:
    seen: list[launching.RankMessage] = []
    with pytest.raises(RankError) as info:
        launching.launch(launch_fixtures.fail_on, 2, args=(1,), on_message=seen.append)
    err = info.value
    assert err.rank == 1 and err.exc_type == "KeyError"
    assert str(err).startswith("rank 1 failed: KeyError: 'no label for batch 1 on rank 1'")
    assert "--- traceback in rank 1 ---" in str(err) and "fail_on" in err.remote_traceback
    pids = [m.payload[0] for m in seen if m.kind == "started"]
    port = next(m.payload[1] for m in seen if m.kind == "started")
    assert leftovers(pids, port) == []  # rank 0 was waiting in a barrier: killed


@pytest.mark.timeout(120)
def test_a_rank_killed_by_a_signal_is_named() -> None:
    with pytest.raises(RankError, match=r"rank 0 died \(killed by SIGKILL\) before returning"):
        launching.launch(launch_fixtures.die_on, 2, args=(0,))


@pytest.mark.slow  # waits out the launch timeout
@pytest.mark.timeout(120)
def test_timeout_stops_every_rank() -> None:
    seen: list[launching.RankMessage] = []
    # long enough for each rank's process worker to start (a rank's first process worker also
    # starts that rank's forkserver: an interpreter importing torch, seconds on a loaded machine)
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] still running after timeout_s=30"):
        launching.launch(launch_fixtures.forever, 2, timeout_s=30, on_message=seen.append)
    pids = [m.payload[0] for m in seen if m.kind == "started"]
    assert len(pids) == 2 and any(m.kind == "batch" for m in seen)
    assert leftovers(pids, seen[0].payload[1]) == []


def test_train_fn_must_be_importable_by_name() -> None:
    with pytest.raises(ConfigError, match="where the ranks cannot import it"):
        launching.launch(lambda rank, world_size: None, 2)

    def local(rank: int, world_size: int) -> None: ...

    with pytest.raises(ConfigError, match="define it at the top level of a module"):
        launching.launch(local, 2)
    with pytest.raises(ConfigError, match="world_size"):
        launching.launch(launch_fixtures.read_shards, 0)
    with pytest.raises(ConfigError, match="cannot be pickled"):
        launching.launch(launch_fixtures.read_shards, 1, args=(lambda: 0,))
