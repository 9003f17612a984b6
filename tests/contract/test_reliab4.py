"""Never silently wrong, round four (issue 32): the reliability cases of
``public-bug-scenarios-4.md`` (B57, B59, B60, B61, B62, B67, B69) and the classes the issue holds
back.

Each test named ``test_bNN_...`` is case BNN with its exact expected value, under every backend
it applies to (the ``backend`` fixture: inline, thread, process). No test times anything; every
test that starts workers runs under the module's timeout.
"""

from __future__ import annotations

import contextlib
import gc
import http.server
import io
import json
import os
import re
import socket
import tarfile
import threading
import tracemalloc
import warnings
from typing import Any

import psutil
import pytest
import torch

from clorch_nb import data
from clorch_nb import launch as launching
from clorch_nb.errors import ConfigError, RankError, ShardError, SkipBudgetError
from tests import launch_fixtures
from tests import reliab4_fixtures as f4
from tests import semantics3_fixtures as f3
from tests.fixtures import idx
from tests.shard_fixtures import cls_of, numbered_tars, write_parquet
from tests.soak.checks import check_outcome
from tests.soak.episode import Episode, Outcome, draw, expected_order

pytestmark = pytest.mark.timeout(120)


def dl(dataset: Any, backend: dict[str, Any], **kw: Any) -> data.DataLoader:
    opts = {k: v for k, v in backend.items() if k != "name"}
    opts.update(kw)
    return data.dataloader(dataset, **opts)


def sd(sources: Any, **kw: Any) -> Any:
    kw.setdefault("progress", False)
    return data.shard_dataset(sources, **kw)


def _jsonl(path: str, rows: list[dict[str, Any]]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


# -- B57: a shard path that exists is read as written, never as a pattern -----------------------


def test_b57_an_existing_path_with_glob_characters_is_that_file(tmp_path: Any) -> None:
    """B57: ``run[1]/part.jsonl`` used to be read as the glob ``run[1]`` = ``run1`` (another
    file's rows), and once ``run1`` was gone, refused as matching nothing. A name that exists is
    the file, alone or in a list; a pattern still expands when no such file exists."""
    literal = str(tmp_path / "run[1]" / "part.jsonl")
    _jsonl(literal, [{"src": "literal", "i": i} for i in range(3)])
    _jsonl(str(tmp_path / "run1" / "part.jsonl"), [{"src": "OTHER", "i": i} for i in range(3)])
    ds = sd(literal)
    assert ds.get_item(0) == {"src": "literal", "i": 0}
    assert [ds.get_item(i)["src"] for i in range(ds.get_size())] == ["literal"] * 3
    # braces in an existing name are the name too
    braced = str(tmp_path / "set{a,b}" / "part.jsonl")
    _jsonl(braced, [{"src": "braced", "i": 0}])
    assert sd([braced]).get_item(0) == {"src": "braced", "i": 0}
    # a pattern that names no file still expands: run? matches run1 only (not "run[1]")
    pattern = sd(str(tmp_path / "run?" / "part.jsonl"))
    assert pattern.get_item(0) == {"src": "OTHER", "i": 0}
    os.remove(tmp_path / "run1" / "part.jsonl")
    os.rmdir(tmp_path / "run1")
    assert sd([literal]).get_item(2) == {"src": "literal", "i": 2}
    with pytest.raises(ConfigError, match=r"sources glob .*run\?.* matches no file"):
        sd(str(tmp_path / "run?" / "part.jsonl"))


# -- B62: max_failures at batch_size=1 ----------------------------------------------------------


def _batch_events(events: list[Any]) -> list[Any]:
    return [e for e in events if type(e).__name__ == "BatchEvent"]


def _drain(it: Any) -> list[Any]:
    out: list[Any] = []
    while True:
        try:
            out.append(idx(next(it)))
        except StopIteration:
            return out
        except Exception as exc:  # noqa: BLE001 - what the case used to see
            out.append(type(exc).__name__)


def test_b62_max_failures_skips_a_bad_item_at_batch_size_1(backend: dict[str, Any]) -> None:
    """B62: at ``batch_size=1`` a bad item is a batch with nothing to fill it with; it used to
    raise anyway (``max_failures`` did nothing). It is now dropped within the budget, charged to
    it and named in its batch's event; ``batch_size=2`` keeps filling from the batch."""
    events: list[Any] = []
    with dl(f4.CorruptAt3(), backend, batch_size=1, shuffle=False, max_failures=2) as d:
        d.events.subscribe(events.append)
        assert _drain(iter(d)) == [[0], [1], [2], [4], [5], [6], [7]]
        assert [(e.batch_index, e.skipped) for e in _batch_events(events) if e.skipped] == [
            (3, (3,))
        ]
        assert d.stats.batches == 7
    with dl(f4.CorruptAt3(), backend, batch_size=2, shuffle=False, max_failures=2) as d:
        assert _drain(iter(d)) == [[0, 1], [2, 2], [4, 5], [6, 7]]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("in_order", [True, False])
def test_b62_torch_front_default_batch_size_skips_too(num_workers: int, in_order: bool) -> None:
    """B62 on the torch front, at its default ``batch_size=1``, in and out of order (inline, and
    the process workers that front picks for a dataset with a ``process_spec``)."""
    with data.DataLoader(
        f4.CorruptAt3(), max_failures=2, in_order=in_order, num_workers=num_workers
    ) as t:
        got = _drain(iter(t))
    assert (got if in_order else sorted(got)) == [[0], [1], [2], [4], [5], [6], [7]]


def test_b62_a_dropped_batch_is_charged_to_the_budget(backend: dict[str, Any]) -> None:
    """B62: the dropped item counts: ``max_failures=0`` raises ``SkipBudgetError`` naming it."""
    with dl(f4.CorruptAt3(), backend, batch_size=1, shuffle=False, max_failures=0) as d:
        it = iter(d)
        assert [idx(next(it)) for _ in range(3)] == [[0], [1], [2]]
        with pytest.raises(SkipBudgetError, match=r"index 3 \(batch 3\): OSError: image file"):
            next(it)


# -- B61: persistent_workers=False and an epoch left early -------------------------------------


def _tensors(n: int) -> Any:
    return data.tensor_dataset(torch.zeros(n, 1), torch.arange(n))


def _worker_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if "-worker-" in t.name)


@pytest.mark.parametrize("how", ["del", "new_iter", "persistent"])
@pytest.mark.parametrize("kind", ["thread", "process"])
def test_b61_an_epoch_left_early_ends_non_persistent_workers(kind: str, how: str) -> None:
    """B61: on the torch front (``persistent_workers=False``) workers used to end only when an
    epoch was delivered to its end: after ``break`` + ``del it`` they stayed alive as long as the
    loader. They now end with the iterator (and when a new ``iter()`` supersedes it); with
    ``persistent_workers=True`` they stay, as torch's do."""
    ds = f4.Items(64) if kind == "process" else _tensors(64)
    persistent = how == "persistent"
    d = data.DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=persistent,
                        worker_backend=kind)  # fmt: skip
    try:
        assert d.worker_backend == kind
        it = iter(d)
        assert [idx(next(it)) for _ in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        if kind == "process":
            pids = d.worker_pids()
            assert len(pids) == 2
        else:
            assert len(_worker_threads()) == 2
        if how == "new_iter":
            it2 = iter(d)  # supersedes the first; its own workers start for the new epoch
            del it2
        del it
        gc.collect()
        alive = d.worker_pids() if kind == "process" else _worker_threads()
        assert len(alive) == (2 if persistent else 0)
        if kind == "process" and not persistent:
            for pid in pids:  # the processes themselves are gone (reaped), not only unlisted
                assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
        # and the loader still works: a new epoch starts its workers again
        assert [idx(b) for b in d][:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    finally:
        d.close()


# -- B67: memory:// shards under workers ---------------------------------------------------------


@pytest.fixture
def memory_shards() -> Any:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = f"/reliab4-{os.getpid()}-{id(fs)}"
    for k in range(2):
        body = "".join(json.dumps({"i": 8 * k + j}) + "\n" for j in range(8))
        with fs.open(f"{root}/part-{k}.jsonl", "w") as fh:
            fh.write(body)
    try:
        yield f"memory://{root}/part-{{0..1}}.jsonl"
    finally:
        fs.rm(root, recursive=True)


def _ints(batch: Any) -> list[int]:
    return [int(v) for v in batch["i"]]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_b67_memory_shards_load_with_workers(memory_shards: str, num_workers: int) -> None:
    """B67: ``memory://`` files exist only in the process that wrote them; ``"auto"`` used to
    pick process workers for a shard dataset, which failed with "check the path and the
    credentials". ``"auto"`` now picks threads for it, on both fronts."""
    expected = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    ds = sd(memory_shards)
    with data.dataloader(ds, batch_size=4, shuffle=False, num_workers=num_workers) as d:
        assert d.worker_backend == ("inline" if num_workers == 0 else "thread")
        assert [_ints(b) for b in d] == expected
    with data.DataLoader(ds, batch_size=4, num_workers=num_workers) as t:
        assert [_ints(b) for b in t] == expected
    assert ds.process_local is not None and "memory filesystem" in ds.process_local


def test_b67_memory_shards_refuse_process_workers_by_name(memory_shards: str) -> None:
    """B67: asked for processes explicitly, the loader refuses before any worker starts, saying
    the memory filesystem is per process and naming the fix of the front that asked."""
    ds = sd(memory_shards)
    with pytest.raises(
        ConfigError,
        match=r"^worker_backend='process' cannot be used with this dataset: shard "
        r"'memory://.*part-0.jsonl' is on fsspec's memory filesystem, which exists only in the "
        r"process that wrote it .*: use worker_backend='thread'$",
    ):
        data.dataloader(ds, batch_size=4, num_workers=2, worker_backend="process")
    with pytest.raises(
        ConfigError,
        match=r"^multiprocessing_context='spawn' \(process workers\) cannot be used with this "
        r"dataset: .*memory filesystem.*: drop multiprocessing_context= \(thread workers",
    ):
        data.DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="spawn")


# -- held back: client settings keep the time bound; a server that ignores Range ---------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _NoRangeHandler(http.server.SimpleHTTPRequestHandler):
    """Python's own file server: it ignores ``Range`` and answers every GET with the whole file
    (HTTP 200). Records the ``X-Token`` header of each request."""

    tokens: list[str | None] = []

    def log_message(self, *args: Any) -> None:
        pass

    def send_head(self) -> Any:
        self.tokens.append(self.headers.get("X-Token"))
        return super().send_head()


@pytest.fixture(scope="module")
def fsspec_io() -> None:
    """fsspec's IO thread lives for the session: started before a test's leak check."""
    pytest.importorskip("aiohttp")
    pytest.importorskip("fsspec.asyn").get_loop()


@contextlib.contextmanager
def _serve(handler: Any) -> Any:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", _free_port()), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="test-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_server_that_ignores_range_is_read_correctly(tmp_path: Any, fsspec_io: None) -> None:
    """Held back: a server that ignores ``Range`` sends the whole object; that used to be
    reported as a truncated or rewritten shard. The range is now cut from it (exact items, tar
    and JSONL), the client's headers are sent, and one warning names the server."""
    numbered_tars(tmp_path, [3, 2])
    _jsonl(str(tmp_path / "rows.jsonl"), [{"i": i} for i in range(5)])
    _NoRangeHandler.tokens = []

    def handler(*a: Any, **k: Any) -> Any:
        return _NoRangeHandler(*a, directory=str(tmp_path), **k)

    opts = {"client_kwargs": {"headers": {"X-Token": "t0k"}}}
    with _serve(handler) as root, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tars = sd([f"{root}/shard-{k:05d}.tar" for k in range(2)], transform=cls_of,
                  storage_options=opts, cache_dir=tmp_path / "idx")  # fmt: skip
        assert tars.counts == (3, 2)
        assert tars.get_items([4, 1, 2, 0, 3]) == [4, 1, 2, 0, 3]
        rows = sd(f"{root}/rows.jsonl", storage_options=opts, cache_dir=tmp_path / "idx")
        assert [rows.get_item(i) for i in (3, 0, 4)] == [{"i": 3}, {"i": 0}, {"i": 4}]
    ranges = [str(w.message) for w in caught if "ignores HTTP Range" in str(w.message)]
    assert len(ranges) == 1 and f"{root.split('//')[1]!r} ignores HTTP Range" in ranges[0]
    assert not [w for w in caught if "truncated" in str(w.message)]
    assert set(_NoRangeHandler.tokens) == {"t0k"}


def test_client_kwargs_keep_the_time_bound_against_a_stalled_server(
    tmp_path: Any, fsspec_io: None
) -> None:
    """Held back: ``storage_options={"client_kwargs": {"headers": ...}}`` used to replace the
    HTTP client's settings, time bound included: a server that accepts and never answers hung
    the loader for aiohttp's 5 minutes. ``timeout_s`` now bounds it whatever else the client
    carries: one attempt, then a ``ShardError`` naming the URL and the bound."""
    held: list[socket.socket] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def accept() -> None:  # take connections, read nothing, answer nothing
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, name="test-stall", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/stalled.jsonl"
    try:
        with pytest.raises(
            ShardError, match=r"stalled.jsonl' could not be read after 1 attempts \(timeout_s=0.5\)"
        ):
            sd(url, storage_options={"client_kwargs": {"headers": {"X-Token": "t"}}},
               timeout_s=0.5, retries=0, cache_dir=tmp_path)  # fmt: skip
    finally:
        stop.set()
        thread.join(5)
        for s in held:
            s.close()
        listener.close()


# -- B59: the same file twice in one WebDataset sample ------------------------------------------


def _tar(path: Any, members: list[tuple[str, bytes]]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return str(path)


def test_b59_a_field_given_twice_in_one_item_is_refused_at_counting(tmp_path: Any) -> None:
    """B59: ``000.jpg`` twice in one sample used to keep the second silently (the first image
    lost); ``001.JPG`` next to ``001.jpg`` dropped one too. Counting now refuses the shard,
    naming it, the item and both files, as WebDataset raises "duplicate file name"."""
    case = _tar(tmp_path / "dup.tar", [
        ("000.jpg", b"first-image"), ("000.cls", b"3"), ("000.jpg", b"second-image"),
        ("001.jpg", b"y"), ("001.JPG", b"Y"), ("002.jpg", b"z"), ("002.cls", b"1"),
    ])  # fmt: skip
    with pytest.raises(ShardError) as ei:
        sd(case, cache_dir=tmp_path)
    assert str(ei.value) == (
        f"shard {case!r}, item 0: '000.jpg' repeats field 'jpg' of its item (already given by "
        "'000.jpg'; extensions are compared in lower case, as WebDataset does), so one of the "
        "two files would be lost. WebDataset refuses it too ('duplicate file name in tar "
        "file'); rewrite the shard with one file per field"
    )
    assert (ei.value.shard, ei.value.offset) == (case, 0)
    upper = _tar(tmp_path / "case.tar", [("000.jpg", b"x"), ("001.jpg", b"y"), ("001.JPG", b"Y")])
    with pytest.raises(ShardError, match=r"item 1: '001.JPG' repeats field 'jpg' .*'001.jpg'"):
        sd(upper, cache_dir=tmp_path)


def test_b59_a_key_that_comes_back_later_is_refused(tmp_path: Any) -> None:
    """B59, merged shards: key ``000`` again after ``001`` would be a second sample under one
    key (its label paired with the wrong image downstream): refused naming both items; a
    well-formed shard still reads exactly."""
    merged = _tar(tmp_path / "merged.tar", [
        ("000.jpg", b"a"), ("001.jpg", b"b"), ("000.cls", b"0"),
    ])  # fmt: skip
    with pytest.raises(ShardError, match=r"item 2: '000.cls' starts a second item with key "
                       r"'000' \(item 0 has it"):  # fmt: skip
        sd(merged, cache_dir=tmp_path)
    good = _tar(tmp_path / "good.tar", [
        ("000.jpg", b"a"), ("000.cls", b"0"), ("001.jpg", b"b"), ("001.cls", b"1"),
    ])  # fmt: skip
    ds = sd(good, cache_dir=tmp_path)
    items = [ds.get_item(i) for i in range(ds.get_size())]
    assert [(x["__key__"], x["jpg"], x["cls"]) for x in items] == [
        ("000", b"a", b"0"), ("001", b"b", b"1"),
    ]  # fmt: skip


# -- B60: a Parquet shard with one large row group ----------------------------------------------


def test_b60_one_large_row_group_is_decoded_once_and_sliced(
    tmp_path: Any, backend: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """B60: pyarrow's default writes one row group; every block read used to decode the whole
    group and convert all its rows to Python (an epoch O(rows**2 / block), the whole shard as
    Python objects at every read). Now the group is decoded once per dataset copy and only the
    rows asked for become Python objects; the items are exactly the rows, in order."""
    pq = pytest.importorskip("pyarrow.parquet")
    n = 20_000
    rows = [{"i": i, "s": f"{i:020d}"} for i in range(n)]
    path = write_parquet(tmp_path / "one.parquet", rows, row_group_size=n)
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    ds = sd(str(path), cache_dir=tmp_path)
    decoded: list[int] = []
    read_row_groups = pq.ParquetFile.read_row_groups

    def counting(self: Any, row_groups: Any, *a: Any, **k: Any) -> Any:
        decoded.append(len(row_groups))
        return read_row_groups(self, row_groups, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", counting)
    tracemalloc.start()
    try:
        first = ds.get_items(list(range(100, 164)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == [{"i": i, "s": f"{i:020d}"} for i in range(100, 164)]
    assert peak < 2 << 20  # 64 rows' objects (the whole group as dicts was ~6 MiB here)
    assert decoded == [1]
    sampler = data.distributed_sampler(ds, num_replicas=1, rank=0, shuffle=False)
    with dl(ds, backend, batch_size=64, sampler=sampler) as d:
        got = [int(v) for b in d for v in b["i"]]
    if backend["name"] == "inline":
        assert got == list(range(n))
        assert decoded == [1]  # the whole epoch from the one decoded group
    else:  # workers take whole blocks each (the shard sampler plans for them): each row once
        assert sorted(got) == list(range(n))


# -- B69: launch, a rank that returns early ---------------------------------------------------


@pytest.mark.timeout(180)
def test_b69_a_rank_that_returns_early_is_named() -> None:
    """B69: rank 1 returns while rank 0 waits in ``all_reduce``; gloo fails rank 0 with
    "Connection closed by peer ... a remote worker crashing", and the launch used to blame rank
    0 alone. The ``RankError`` now names rank 1 as having returned while rank 0 still waited in
    a collective (unequal steps), with rank 0's error and traceback attached."""
    with pytest.raises(RankError) as ei:
        launching.launch(launch_fixtures.rank_returns_early, world_size=2, timeout_s=120)
    err = ei.value
    assert (err.rank, err.returned) == (0, (1,))
    assert str(err).startswith(
        "rank 1 returned from train_fn while rank 0 still waited in a collective (all_reduce, "
        "barrier, ...): the ranks ran unequal numbers of steps or collectives"
    )
    assert "Rank 0's error: " in str(err) and "all_reduce" in err.remote_traceback


# -- held back: replay of a batch whose delivery skipped items -----------------------------------


def test_replay_of_a_batch_with_skipped_items_rebuilds_it_or_refuses(
    tmp_path: Any, backend: dict[str, Any]
) -> None:
    """Held back: batch 1 (``[2, 3]``) was delivered as ``[2, 2]`` (item 3 failed, filled from
    the batch). Replay used to build it without ``max_failures`` (raising item 3's error), and
    once the fault was gone returned ``[2, 3]``, a batch never delivered. Now it rebuilds
    ``[2, 2]`` with ``skipped == (3,)`` while the same item fails, and refuses, naming both,
    when it no longer does; a loader that did not deliver the epoch needs ``skipped=``."""
    flag = tmp_path / "fault"
    flag.write_text("on")
    ds = f4.FailsWhileFlagged(8, str(flag), [3])
    with dl(ds, backend, batch_size=2, shuffle=False, max_failures=1) as d:
        assert [idx(b) for b in d] == [[0, 1], [2, 2], [4, 5], [6, 7]]
        again = data.replay(d, epoch=0, batch=1)
        assert (idx(again.batch), again.indices, again.skipped) == ([2, 2], [2, 3], (3,))
        assert idx(data.replay(d, epoch=0, batch=2).batch) == [4, 5]
        fresh = data.dataloader(ds, batch_size=2, shuffle=False, max_failures=1, seed=d.seed)
        with pytest.raises(ConfigError, match=r"cannot tell which items that batch skipped"):
            data.replay(fresh, epoch=0, batch=1)
        assert idx(data.replay(fresh, epoch=0, batch=1, skipped=(3,)).batch) == [2, 2]
        flag.unlink()  # the fault is gone: item 3 loads now
        with pytest.raises(
            ConfigError,
            match=r"delivered with dataset indices \[3\] skipped \(max_failures\), but rebuilt "
            r"now none fail",
        ):
            data.replay(d, epoch=0, batch=1)
        assert idx(data.replay(d, epoch=0, batch=2).batch) == [4, 5]


def test_replay_of_a_dropped_batch_says_nothing_was_delivered(backend: dict[str, Any]) -> None:
    """Held back with B62: at ``batch_size=1`` batch 3 (item 3) was dropped; its replay must not
    return batch 4's item (what the twin's next batch is) but say it was dropped."""
    with dl(f4.CorruptAt3(), backend, batch_size=1, shuffle=False, max_failures=1) as d:
        assert [idx(b) for b in d] == [[0], [1], [2], [4], [5], [6], [7]]
        with pytest.raises(ConfigError, match=r"every item of it fails \(dataset indices \[3\]\)"):
            data.replay(d, epoch=0, batch=3)
        assert idx(data.replay(d, epoch=0, batch=4).batch) == [4]


# -- held back: two loaders over one sampler object ---------------------------------------------


def test_two_loaders_over_one_shard_sampler_do_not_mix_settings(tmp_path: Any) -> None:
    """Held back: a ShardSampler plans whole batches for its loader; a second loader over the
    same object with ``batch_size=2`` used to re-plan it, so the first loader (``batch_size=4``)
    silently delivered batches of 2 and saved ``batch_size=2`` in its checkpoint. The second
    loader is now refused by name while the first is alive; the same settings are allowed
    (a cell run again), and so are other settings once the first loader is gone."""
    _jsonl(str(tmp_path / "rows.jsonl"), [{"i": i} for i in range(16)])
    ds = sd(str(tmp_path / "rows.jsonl"), cache_dir=tmp_path)
    s = data.distributed_sampler(ds, num_replicas=1, rank=0, shuffle=False)
    first = data.dataloader(ds, batch_size=4, sampler=s)
    with pytest.raises(ConfigError, match=r"already plans the batches of another loader .*"
                       r"\(batch_size=4, num_workers=0, drop_last=False\); a second one with "
                       r"batch_size=2"):  # fmt: skip
        data.dataloader(ds, batch_size=2, sampler=s)
    it = iter(first)
    assert [_ints(next(it)) for _ in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    state = first.state_dict()
    assert (state["sampler"]["batch_size"], state["batches_done"]) == (4, 2)
    again = data.dataloader(ds, batch_size=4, sampler=s)  # same settings: the same plan
    assert [_ints(b) for b in again] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11],
                                         [12, 13, 14, 15]]  # fmt: skip
    again.close()
    first.close()  # a closed loader gives the sampler up...
    other = data.dataloader(ds, batch_size=8, sampler=s)
    assert [_ints(b) for b in other] == [list(range(8)), list(range(8, 16))]
    with pytest.raises(ConfigError, match=r"\(batch_size=8, num_workers=0, drop_last=False\); "
                       r"a second one with batch_size=4"):  # fmt: skip
        iter(first)  # ...and takes it back at its next iter(), unless another loader has it
    del it, other
    gc.collect()
    assert [_ints(b) for b in first][:1] == [[0, 1, 2, 3]]  # the other loader is gone


# -- named last round: a handle opened lazily, shared by thread workers -------------------------


@pytest.mark.parametrize("front", ["dataloader", "DataLoader"])
def test_a_handle_opened_on_first_use_is_refused_before_any_batch(
    tmp_path: Any, front: str
) -> None:
    """Last round refused a handle opened in ``__init__``; one opened by the first
    ``get_item`` slipped through and thread workers read other records' bytes. The pool now
    looks again once its first batch is built, before handing any over: the epoch ends with an
    error naming the attribute, and no batch (wrong or right) is delivered."""
    path = str(tmp_path / "records.bin")
    f4.write_records(path, 256)
    ds = f4.LazyRecords(path, 256)
    if front == "dataloader":
        d = data.dataloader(ds, batch_size=8, shuffle=False, num_workers=2,
                            worker_backend="thread")  # fmt: skip
    else:
        d = data.DataLoader(ds, batch_size=8, num_workers=2, worker_backend="thread")
    with d:
        assert d.worker_backend == "thread"
        delivered: list[Any] = []
        with pytest.raises(ConfigError) as ei:
            for b in d:
                delivered.append(b)
        assert delivered == []
        assert re.match(
            r"thread workers would share this dataset's dataset\.fh \(BufferedReader\), which "
            r"its get_item opened \(found when batch \d+ was built: a handle opened on first "
            r"use\): "
            r".*; nothing was delivered\. Fix: open per worker",
            str(ei.value),
        )
    ds.fh.close()
    alone = f4.LazyRecords(path, 256)
    inline = data.dataloader(alone, batch_size=8, shuffle=False)
    assert all(b["first"].tolist() == [i % 256 for i in idx(b)] for b in inline)
    alone.fh.close()


# -- named last round: resume from a checkpoint taken at an epoch boundary -----------------------


def _noisy_epochs(loader: Any, epochs: range) -> list[list[tuple[int, float]]]:
    return [[(int(t), float(x)) for b in loader for t, x in zip(b["target"], b["noise"],
                                                                 strict=True)]
            for _ in epochs]  # fmt: skip


@pytest.mark.parametrize("where", ["after_last_batch", "after_loop"])
def test_resume_at_an_epoch_boundary_has_the_same_indices_and_augmentation(
    backend: dict[str, Any], where: str
) -> None:
    """A state saved after the last batch of epoch 0, loaded into a fresh loader whose loop
    resumes its own epoch counter (0 inside the loop, 1 after it), gives epochs 1 and 2 the
    indices *and* the per-item random values of the uninterrupted run, and trains no epoch more:
    torchdata's convention (issue 42), a state taken inside the loop resumes into epoch 0's
    empty remainder (it used to jump to epoch 1, so such a loop ran one epoch more)."""
    kw = {"batch_size": 3, "shuffle": True, "seed": 7}
    with dl(f3.Augmented(10), backend, **kw) as d:
        straight = _noisy_epochs(d, range(3))
    with dl(f3.Augmented(10), backend, **kw) as d:
        it = iter(d)
        n = len(it)
        for k, _ in enumerate(it):
            if k == n - 1 and where == "after_last_batch":
                state = d.state_dict()
        if where == "after_loop":
            state = d.state_dict()
    state = json.loads(json.dumps(state))
    counter = 0 if where == "after_last_batch" else 1  # the loop's own epoch counter, saved
    assert (state["epoch"], state["batches_done"]) == ((0, n) if counter == 0 else (1, 0))
    with dl(f3.Augmented(10), backend, **kw) as d:
        d.load_state_dict(state)
        resumed = _noisy_epochs(d, range(counter, 3))
    assert resumed == [[]] * (1 - counter) + straight[1:]
    assert straight[1] != straight[2]  # the epochs differ: the comparison can fail


# -- the soak covers max_failures (B62) ----------------------------------------------------------


def test_the_soak_draws_max_failures_and_its_checks_judge_the_skip_rule() -> None:
    """The fixed-seed soak now draws ``max_failures`` for faults that raise (in a known order):
    its expected order applies the fill rule and drops a batch of only the bad item, so a
    delivered bad item, an error, or a missing drop is a violation."""
    eps = [draw(15, i) for i in range(300)]
    skipping = [e for e in eps if e.max_failures is not None]
    assert len(skipping) == 13 and {e.backend for e in skipping} == {"inline", "thread", "process"}
    assert any(e.batch_size == 1 for e in skipping)
    base = {
        **eps[0].__dict__,
        "n": 6,
        "batch_size": 2,
        "order": "seq",
        "drop_last": False,
        "sampler_args": (),
        "fault": "raise",
        "at": 3,
        "consumer": "full",
        "max_failures": 32,
    }
    ep = Episode(**base)  # type: ignore[arg-type]
    assert expected_order(ep) == [0, 1, 2, 2, 4, 5]
    assert check_outcome(ep, Outcome(epochs=[[0, 1, 2, 2, 4, 5]], errors=[None],
                                     complete=[True])) == []  # fmt: skip
    assert check_outcome(ep, Outcome(epochs=[[0, 1, 2, 3, 4, 5]], errors=[None], complete=[True]))
    one = Episode(**{**base, "batch_size": 1})  # type: ignore[arg-type]
    assert expected_order(one) == [0, 1, 2, 4, 5]  # batch 3 dropped
    assert check_outcome(one, Outcome(epochs=[[0, 1, 2]], errors=[RuntimeError("x")],
                                      complete=[True]))  # fmt: skip
