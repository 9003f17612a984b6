"""Never silently wrong (issue 10): iterators, state between epochs, thread safety, batch
samplers, errors from dataset code, samplers of another size, start-up vs timeouts.

Each test runs under every backend (the ``backend`` fixture: inline, thread, process) with exact
values. Tests named ``test_bNN_...`` are the cases of ``public-bug-scenarios-2.md``.
"""

from __future__ import annotations

import collections
import math
import threading
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from clorch_nb import data
from clorch_nb.errors import (
    ConfigError,
    StaleIteratorError,
    WorkerStateError,
    WorkerTimeoutError,
)
from tests import semantics_fixtures as sf
from tests.fixtures import ds, idx

pytestmark = pytest.mark.timeout(120)


def dl(dataset: Any, backend: dict[str, Any], **kw: Any) -> data.DataLoader:
    opts = {k: v for k, v in backend.items() if k != "name"}
    opts.update(kw)
    return data.dataloader(dataset, **opts)


def numbers(n: int) -> Any:
    """``ds(n)`` that process workers can rebuild (``tensor_dataset`` is shared either way)."""
    return ds(n)


# -- B21: two iterators over one loader -----------------------------------------------------------


def test_b21_zip_over_one_loader_raises_instead_of_a_short_epoch(backend: dict[str, Any]) -> None:
    """B21 ("Two live iterators over one loader"): ``zip(d, d)`` used to give ``[]`` silently.
    The second ``iter()`` stops the first epoch, whose iterator then raises saying why."""
    with dl(ds(6), backend, batch_size=2, shuffle=False) as d:
        with pytest.raises(
            StaleIteratorError,
            match=(
                r"epoch 0 was stopped after 0 of 3 batches: iter\(loader\) was called again and "
                r"started epoch 1.*loader\.peek\(\).*make two loaders"
            ),
        ):
            [(idx(a), idx(b)) for a, b in zip(d, d, strict=False)]
        assert [idx(b) for b in d] == [[0, 1], [2, 3], [4, 5]]  # the loader is fine after


def test_b21_peek_by_iter_makes_the_running_epoch_raise(backend: dict[str, Any]) -> None:
    """B21: ``it = iter(d); next(it); next(iter(d))`` then the rest of ``it``: an error naming
    how far the epoch got, every time it is asked, never a silently short epoch."""
    with dl(ds(6), backend, batch_size=2, shuffle=False) as d:
        it = iter(d)
        assert idx(next(it)) == [0, 1]
        assert idx(next(iter(d))) == [0, 1]  # the peek: a new epoch
        for _ in range(2):
            with pytest.raises(StaleIteratorError, match="epoch 0 was stopped after 1 of 3"):
                next(it)


def test_b21_peek_looks_without_disturbing_the_running_epoch(backend: dict[str, Any]) -> None:
    """B21's way out: ``loader.peek(i)`` builds batch ``i`` of the open epoch on this thread;
    the epoch goes on untouched: rest ``[[2, 3], [4, 5]]``, 3 batches counted, no new epoch."""
    with dl(ds(6), backend, batch_size=2, shuffle=False) as d:
        events: list[Any] = []
        d.subscribe(events.append)
        it = iter(d)
        assert idx(next(it)) == [0, 1]
        assert idx(d.peek()) == [0, 1] and idx(d.peek(2)) == [4, 5] and idx(d.peek(-1)) == [4, 5]
        with pytest.raises(IndexError, match=r"batch_index=3 is outside the epoch's 3 batches"):
            d.peek(3)
        assert [idx(b) for b in it] == [[2, 3], [4, 5]]
        assert d.stats.batches == 3 and d.stats.epochs_started == 1
        assert [e.kind for e in events if type(e).__name__ == "EpochEvent"] == ["start", "end"]


@pytest.mark.parametrize("seeded", [True, False])
def test_b21_peek_before_an_epoch_shows_its_first_batch_and_draws_nothing(
    backend: dict[str, Any], seeded: bool
) -> None:
    """With no epoch open, ``peek()`` is the first batch of the epoch ``iter()`` starts next
    (shuffled: the same permutation), and no RNG moves: torch's global state is unchanged and a
    ``get_item`` that draws random numbers draws them again in the real epoch."""
    torch.manual_seed(7)
    with dl(ds(10), backend, batch_size=3, seed=5 if seeded else None) as d:
        state = torch.get_rng_state()
        peeked = idx(d.peek())
        assert torch.equal(torch.get_rng_state(), state)
        first = idx(next(iter(d)))
    assert peeked == first and len(first) == 3


def test_b21_peek_does_not_count_as_iterating_a_distributed_sampler() -> None:
    """``peek()`` does not tell a DistributedSampler it was iterated (no B02 warning after)."""
    s = data.distributed_sampler(8, num_replicas=2, rank=0, seed=0)
    d = data.dataloader(ds(8), batch_size=2, sampler=s)
    with pytest.warns(UserWarning, match="iterated twice") as record:
        d.peek()
        first = [idx(b) for b in d]
        [idx(b) for b in d]  # a real second pass at one epoch: the one warning
    assert len(record) == 1 and len(first) == 2


# -- state that changes between epochs ------------------------------------------------------------


def test_set_epoch_reaches_every_worker_before_its_first_batch(backend: dict[str, Any]) -> None:
    """The channel: the dataset's ``set_epoch(epoch)`` runs before each epoch on every copy
    (here; in each process worker), and ``get_worker_info().epoch`` is the epoch."""
    with dl(sf.Curriculum(6), backend, batch_size=2, shuffle=False) as d:
        seen = [
            ([int(x) for b in d for x in b["level"]], {int(x) for b in d for x in b["epoch"]})
            for _ in range(2)
        ]
        it = iter(d)  # epoch 4; this process's copy is kept in step, so peek() agrees
        assert [int(x) for x in next(it)["level"]] == [int(x) for x in d.peek()["level"]] == [2, 2]
    # each pair of epochs above ran two iter()s: epochs 0+1, then 2+3
    levels = [[0] * 6, [2] * 6]
    assert [s[0] for s in seen] == levels
    assert [s[1] for s in seen] == ([{-1}, {-1}] if backend["name"] == "inline" else [{1}, {3}])


def test_state_changed_here_reaches_workers_or_stops_the_loader(backend: dict[str, Any]) -> None:
    """A curriculum level set between epochs (no ``set_epoch``): inline and thread workers share
    the object and see level 1; process workers cannot, and ``iter()`` says so before the
    epoch's first batch, naming the attribute and both values."""
    level = sf.Level(4)
    with dl(level, backend, batch_size=2, shuffle=False) as d:
        assert [int(x) for b in d for x in b["level"]] == [0, 0, 0, 0]
        level.level = 1
        if backend["name"] == "process":
            with pytest.raises(
                WorkerStateError,
                match=(
                    r"dataset attribute 'level' changed from 0 to 1 in this process since the last "
                    r"epoch.*set_epoch\(epoch\)"
                ),
            ):
                iter(d)
        else:
            assert [int(x) for b in d for x in b["level"]] == [1, 1, 1, 1]


def test_replaced_or_edited_tensor_reaches_every_backend(backend: dict[str, Any]) -> None:
    """A ``tensor_dataset`` (no ``process_spec``): a tensor edited in place, or replaced, between
    epochs is what the next epoch loads, under every backend (process workers hold a copy: a
    change gets fresh workers over a fresh copy)."""
    d0 = ds(4)
    with dl(d0, backend, batch_size=2, shuffle=False) as d:
        assert [b["data"][:, 0].tolist() for b in d] == [[0.0, 1.0], [2.0, 3.0]]
        d0.data[0, 0] = 10.0
        assert [b["data"][:, 0].tolist() for b in d] == [[10.0, 1.0], [2.0, 3.0]]
        d0.data = torch.full((4, 1), 7.0)
        assert [b["data"][:, 0].tolist() for b in d] == [[7.0, 7.0], [7.0, 7.0]]


def test_a_failing_set_epoch_stops_the_epoch_before_its_first_batch(
    backend: dict[str, Any],
) -> None:
    """An error in ``set_epoch`` is raised (with a note naming the epoch), never skipped."""

    class Broken(sf.Curriculum):
        def set_epoch(self, epoch: int) -> None:
            raise ValueError(f"no level for epoch {epoch}")

    if backend["name"] == "process":
        broken: Any = sf.Curriculum(4)
        broken.process_spec = {"factory": "tests.semantics_fixtures:broken_curriculum", "args": [4]}
    else:
        broken = Broken(4)
    with (
        dl(broken, backend, batch_size=2, shuffle=False) as d,
        pytest.raises(ValueError, match="no level for epoch 0") as ei,
    ):
        list(d)
    assert any("set_epoch(0)" in n for n in ei.value.__notes__)


# -- B23: datasets that are not thread-safe -------------------------------------------------------


def _wrong(loader: data.DataLoader, epochs: int) -> tuple[int, int]:
    wrong = total = 0
    for _ in range(epochs):
        for b in loader:
            wrong += int((b["value"] != b["target"]).sum())
            total += len(b["target"])
    return wrong, total


@pytest.mark.timeout(180)
def test_b23_a_shared_file_handle_never_gives_wrong_bytes(tmp_path: Any) -> None:
    """B23 ("A file handle opened in the dataset's constructor, shared by workers"): threads
    used to return 12..2135 of 12,000 items with another record's bytes. Now: inline reads are
    right; ``auto`` and ``thread`` refuse the shared handle before the first batch, with the
    fixes; with a ``process_spec`` ``auto`` picks processes (one handle each): 0 wrong."""
    path = str(tmp_path / "records.bin")
    sf.write_records(path, 4000)
    shared = sf.Records(path, 4000, spec=False)
    try:
        with data.dataloader(shared, batch_size=16, shuffle=True, seed=0) as d:
            assert _wrong(d, 3) == (0, 12000)
        for k, backend in ((4, "auto"), (8, "auto"), (4, "thread")):
            with pytest.raises(
                ConfigError,
                match=(
                    rf"worker_backend='{backend}' would run this dataset in thread workers, which "
                    r"share its dataset\.f \(BufferedReader\).*os\.pread.*process_spec.*"
                    r"thread_safe=True"
                ),
            ):
                data.dataloader(shared, batch_size=16, num_workers=k, worker_backend=backend)
    finally:
        shared.close()
    with (
        Closing(sf.Records(path, 4000, spec=True)) as per_worker,
        data.dataloader(per_worker, batch_size=16, seed=0, num_workers=4) as d,
    ):
        assert d.worker_backend == "process"
        assert _wrong(d, 3) == (0, 12000)


class Closing:
    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __enter__(self) -> Any:
        return self.obj

    def __exit__(self, *exc: object) -> None:
        self.obj.close()


def test_b23_the_fixes_load_right_bytes_in_threads(tmp_path: Any) -> None:
    """The thread-safe ways out, under 4 threads: ``os.pread`` (no shared position), and a
    lock around seek + read declared with ``thread_safe = True``: 0 wrong of 12,000."""
    path = str(tmp_path / "records.bin")
    sf.write_records(path, 4000)

    class Locked(sf.Records):
        thread_safe = True

        def __init__(self) -> None:
            super().__init__(path, 4000, spec=False)
            self.lock = threading.Lock()

        def get_item(self, i: int) -> dict[str, Any]:
            with self.lock:
                return super().get_item(i)

    for dataset in (sf.PreadRecords(path, 4000), Locked()):
        with Closing(dataset), data.dataloader(dataset, batch_size=16, seed=0, num_workers=4) as d:
            assert d.worker_backend == "thread"
            assert _wrong(d, 3) == (0, 12000)


def test_b23_a_notebook_global_handle_in_get_item_is_seen(tmp_path: Any) -> None:
    """The notebook form: ``f = open(...)`` in a cell and a ``get_item`` function reading it."""
    path = str(tmp_path / "records.bin")
    sf.write_records(path, 8)
    with open(path, "rb") as f:

        def get_item(i: int) -> bytes:
            f.seek(64 * i)
            return f.read(64)

        with pytest.raises(ConfigError, match=r"share its dataset\._get_item \(closure f\) "):
            data.dataloader(data.dataset(size=8, get_item=get_item), num_workers=2)
        safe = data.dataset(size=8, get_item=get_item, thread_safe=True)
        assert data.dataloader(safe, num_workers=2).worker_backend == "thread"


# -- B27: batch samplers --------------------------------------------------------------------------


def test_b27_batch_sampler_works_as_in_torch(backend: dict[str, Any]) -> None:
    """B27: ``batch_sampler=BatchSampler(SequentialSampler(range(10)), 4, False)`` gives torch's
    ``[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]``; ``len()`` is the batches yielded."""
    bs = BatchSampler(SequentialSampler(range(10)), 4, drop_last=False)
    want = [b.tolist() for b in torch.utils.data.DataLoader(torch.arange(10), batch_sampler=bs)]
    with dl(ds(10), backend, batch_sampler=bs) as d:
        assert d.batch_size is None and d.batch_sampler is bs and len(d) == 3
        assert [idx(b) for b in d] == want == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_b27_bucketing_by_length(backend: dict[str, Any]) -> None:
    """The common use: buckets of similar lengths, each padded only to its own longest item."""
    lengths = [5, 1, 4, 2, 5, 1, 3]

    class Buckets:
        def __iter__(self) -> Any:
            order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
            return iter([order[:3], order[3:5], order[5:]])

        def __len__(self) -> int:
            return 3

    with dl(sf.varlen(lengths), backend, batch_sampler=Buckets(), collate_fn=data.pad_collate) as d:
        got = [(idx(b), tuple(b["x"].shape)) for b in d]
    assert got == [([1, 5, 3], (3, 2)), ([6, 2], (2, 4)), ([0, 4], (2, 5))]


@pytest.mark.parametrize("n", [10, 12])
def test_b27_a_batch_sampler_passed_as_sampler_is_named_as_such(n: int) -> None:
    """B27: ``sampler=BatchSampler(...)`` used to fail with a raw torch error (n=10) or blame
    ``__len__`` (n=12); now, before any batch: it yields batches, pass it as batch_sampler=."""
    bs = BatchSampler(SequentialSampler(range(n)), 4, drop_last=False)
    with pytest.raises(
        ConfigError,
        match=(
            r"sampler BatchSampler yields batches \(lists of indices, e\.g\. \[0, 1, 2, 3\]\), not "
            r"dataset indices: pass it as batch_sampler="
        ),
    ):
        data.dataloader(ds(n), sampler=bs, batch_size=4)


def test_b27_any_sampler_yielding_lists_is_caught_at_its_first_epoch(
    backend: dict[str, Any],
) -> None:
    """A sampler of our own making that yields lists: the same message, at ``iter()``."""

    class Lists:
        def __iter__(self) -> Any:
            return iter([[0, 1], [2, 3]])

        def __len__(self) -> int:
            return 2

    with (
        dl(ds(4), backend, sampler=Lists(), batch_size=2) as d,
        pytest.raises(ConfigError, match=r"sampler Lists yields batches"),
    ):
        iter(d)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (
            {"batch_size": 4},
            r"batch_size=4 cannot be combined with batch_sampler=.*Drop batch_size",
        ),
        ({"shuffle": True}, r"shuffle=True cannot be combined.*BatchSampler\(RandomSampler\(ds\)"),
        ({"sampler": [0, 1]}, r"sampler= cannot be combined.*BatchSampler\(sampler, batch_size"),
        (
            {"drop_last": True},
            r"drop_last=True cannot be combined.*BatchSampler\(\.\.\., drop_last",
        ),
    ],
)
def test_b27_batch_sampler_is_exclusive_with_what_it_decides(
    kw: dict[str, Any], match: str
) -> None:
    """As torch: batch_sampler excludes batch_size, shuffle, sampler, drop_last; each refusal
    names the option and where that choice goes instead."""
    bs = BatchSampler(SequentialSampler(range(4)), 2, drop_last=False)
    with pytest.raises(ConfigError, match=match):
        data.dataloader(ds(4), batch_sampler=bs, **kw)


def test_batch_sampler_that_lies_or_yields_indices() -> None:
    """A batch sampler whose ``len()`` differs from what it yields, or that yields single
    indices, is refused at ``iter()`` naming both numbers, or the mix-up."""

    class Liar:
        def __iter__(self) -> Any:
            return iter([[0, 1], [2]])

        def __len__(self) -> int:
            return 3

    with pytest.raises(ConfigError, match=r"Liar yielded 2 batches but len\(batch_sampler\) is 3"):
        iter(data.dataloader(ds(4), batch_sampler=Liar()))
    with pytest.raises(ConfigError, match=r"SequentialSampler yields single indices \(0\), not"):
        iter(data.dataloader(ds(4), batch_sampler=SequentialSampler(range(4))))
    with pytest.raises(IndexError, match=r"sampler list yielded index 9, outside the dataset"):
        iter(data.dataloader(ds(4), batch_sampler=[[0, 9]]))


# -- errors are never swallowed by protocol fallbacks ---------------------------------------------


@pytest.mark.parametrize("kind", ["IndexError", "StopIteration"])
def test_a_bug_in_get_item_raises_never_ends_the_data(backend: dict[str, Any], kind: str) -> None:
    """A ``get_item`` bug raising IndexError or StopIteration at item 3 of 6 raises from the
    loader (StopIteration as a RuntimeError that says so) after exactly one batch, and from
    ``list(ds)`` / ``for item in ds``: never a shortened epoch or list."""
    buggy = sf.buggy(6, kind, 3)
    want = (
        (IndexError, r"list index out of range")
        if kind == "IndexError"
        else (
            RuntimeError,
            r"get_item raised StopIteration while loading dataset index 3 \(batch 1\)",
        )
    )
    with dl(buggy, backend, batch_size=3, shuffle=False) as d:
        got = []
        with pytest.raises(want[0], match=want[1]):
            for b in d:
                got.append(idx(b))
        assert got == [[0, 1, 2]]
    plain = (
        (IndexError, r"list index out of range")
        if kind == "IndexError"
        else (RuntimeError, r"get_item\(3\) raised StopIteration")
    )
    with pytest.raises(plain[0], match=plain[1]):
        list(buggy)
    with pytest.raises(plain[0], match=plain[1]):
        for _ in buggy:
            pass


# -- a sampler built for another dataset size -----------------------------------------------------


@pytest.mark.parametrize(
    ("sampler", "built_for", "lost"),
    [
        (lambda: data.distributed_sampler(8, num_replicas=2, rank=0), 8, "2 items would never be"),
        (
            lambda: data.distributed_sampler(12, num_replicas=2, rank=1),
            12,
            r"indices 10\.\.11 do not",
        ),
        (lambda: RandomSampler(range(12)), 12, r"indices 10\.\.11 do not exist"),
        (lambda: SequentialSampler(range(9)), 9, "1 item would never be loaded"),
        (
            lambda: torch.utils.data.DistributedSampler(range(8), num_replicas=2, rank=0),
            8,
            "2 items",
        ),
    ],
)
def test_a_sampler_of_another_size_is_refused_naming_both_sizes(
    backend: dict[str, Any], sampler: Any, built_for: int, lost: str
) -> None:
    """Smaller (items silently never loaded) or larger (indices that do not exist): refused when
    the loader is made, naming both sizes."""
    s = sampler()
    with pytest.raises(
        ConfigError,
        match=(
            rf"sampler {type(s).__name__} was built for a dataset of {built_for} items but this "
            rf"dataset has 10 \({lost}"
        ),
    ):
        dl(ds(10), backend, sampler=s, batch_size=2)


def test_a_dataset_that_shrinks_after_the_loader_was_made_is_caught_at_iter() -> None:
    """Sizes are compared again at every epoch (``size`` may be a callable)."""
    size = [10]
    items = data.dataset(size=lambda: size[0], get_item=lambda i: {"target": torch.tensor(i)})
    d = data.dataloader(items, sampler=SequentialSampler(range(10)), batch_size=5)
    assert len(list(d)) == 2
    size[0] = 6
    with pytest.raises(ConfigError, match="built for a dataset of 10 items but this dataset has 6"):
        iter(d)


# -- B34: start-up is not a stuck batch -----------------------------------------------------------


@pytest.mark.timeout(90)
def test_b34_worker_startup_does_not_count_against_timeout_ms(backend: dict[str, Any]) -> None:
    """B34 (``timeout_ms`` shorter than worker start-up): the factory takes 1.5 s per worker,
    ``timeout_ms=1000``; every epoch used to fail blaming ``get_item``. Now all 3 epochs give
    ``[[0, 1], [2, 3], [4, 5], [6, 7]]``."""
    slow = sf.slow_start(8, 1.5)
    with dl(slow, backend, batch_size=2, shuffle=False, timeout_ms=1000) as d:
        assert [[idx(b) for b in d] for _ in range(3)] == [[[0, 1], [2, 3], [4, 5], [6, 7]]] * 3


@pytest.mark.timeout(90)
def test_b34_start_timeout_names_the_start_up_phase(backend: dict[str, Any]) -> None:
    """Start-up has its own limit, ``start_timeout_ms``, and its own message; threads and inline
    have no start-up to wait for and deliver."""
    slow = sf.slow_start(4, 1.5)
    with dl(slow, backend, batch_size=2, shuffle=False, timeout_ms=1000, start_timeout_ms=300) as d:
        if backend["name"] == "process":
            with pytest.raises(
                WorkerTimeoutError,
                match=(
                    r"process worker 0 was still starting after \d\.\d s \(start_timeout_ms=300\): "
                    r"starting its interpreter, building the dataset from its process_spec"
                ),
            ):
                list(d)
        else:
            assert [idx(b) for b in d] == [[0, 1], [2, 3]]


@pytest.mark.timeout(90)
def test_b34_after_a_batch_timeout_the_next_epoch_succeeds(backend: dict[str, Any]) -> None:
    """Items take 1 s in epoch 0 only: epoch 0 times out (the message names the building phase),
    epoch 1 gives every batch (fresh process workers; their start-up is not counted). Inline
    ignores ``timeout_ms`` and has no worker epoch: both epochs deliver."""
    slow = sf.slow_first_epoch(4, 1.0)
    want = [[0, 1], [2, 3]]
    with dl(slow, backend, batch_size=2, shuffle=False, timeout_ms=300) as d:
        if backend["name"] == "inline":
            assert [idx(b) for b in d] == want
        else:
            with pytest.raises(
                WorkerTimeoutError,
                match=(
                    r"batch 0 \(dataset indices \[0, 1\]\), which was not ready within "
                    r"timeout_ms=300.*"
                    r"not the worker's start-up"
                ),
            ):
                list(d)
        assert [idx(b) for b in d] == want


# -- B26, B28, B35: pass today, kept passing ------------------------------------------------------


def test_b26_padding_a_batch_with_a_zero_length_sequence(backend: dict[str, Any]) -> None:
    """B26 ("Padding a batch that holds a zero-length sequence"): torch's ``pad_sequence``
    values, lengths ``[3, 2, 1, 0, 1, 2]``, an all-False mask row for the empty item, shape
    ``(2, 0)`` for all-empty items; through the loader under each backend."""
    items = [{"x": torch.arange(float(abs(n - 3)))} for n in range(6)]
    b = data.pad_collate(items, padding_value=math.nan, mask=True)
    want = torch.nn.utils.rnn.pad_sequence(
        [it["x"] for it in items], batch_first=True, padding_value=math.nan
    )
    assert torch.equal(b["x"].isnan(), want.isnan())
    assert torch.equal(b["x"].nan_to_num(-1), want.nan_to_num(-1))
    assert b["x_lengths"].tolist() == [3, 2, 1, 0, 1, 2]
    assert b["x_mask"][3].tolist() == [False, False, False]
    empty = data.pad_collate([{"x": torch.zeros(0)}, {"x": torch.zeros(0)}])
    assert tuple(empty["x"].shape) == (2, 0) and empty["x_lengths"].tolist() == [0, 0]
    bare = data.pad_collate([torch.zeros(0, 3), torch.ones(2, 3)])
    assert tuple(bare.shape if isinstance(bare, torch.Tensor) else bare[0].shape) == (2, 2, 3)
    with dl(
        sf.zero_lengths(), backend, batch_size=3, shuffle=False, collate_fn=data.pad_collate
    ) as d:
        got = [(tuple(b["x"].shape), b["x_lengths"].tolist()) for b in d]
    assert got == [((3, 3), [3, 2, 1]), ((3, 2), [0, 1, 2])]


@pytest.mark.timeout(120)
def test_b28_a_small_view_of_a_big_tensor_leaves_a_process_worker_alone() -> None:
    """B28 ("An item that is a small view of a big tensor, sent out of a worker process"): the
    received row's storage is its own 4096 B (torch sends the whole 64 MiB base). Process only:
    inline and thread workers hand over the view itself, nothing is sent."""
    with data.dataloader(
        sf.big_base_rows(),
        batch_size=2,
        shuffle=False,
        num_workers=1,
        collate_fn=sf.keep_items,
        worker_backend="process",
    ) as d:
        first = next(iter(d))
        row = first[1]["row"]
        assert row.untyped_storage().nbytes() == 4096
        assert torch.equal(row, torch.arange(1024, 2048, dtype=torch.float32))
    with data.dataloader(
        sf.big_base_rows(), batch_size=2, shuffle=False, num_workers=1, worker_backend="process"
    ) as d:
        batch = next(iter(d))
        assert tuple(batch["row"].shape) == (2, 1024)
        assert batch["row"].untyped_storage().nbytes() == 8192


Pair = collections.namedtuple("Pair", ["x", "y"])


def test_b35_sparse_tensors_through_every_backend(backend: dict[str, Any]) -> None:
    """B35 ("Sparse tensors (and namedtuples) through collation and worker processes"): sparse
    ``(2, 4, 4)`` batches equal to the stacked items, on every backend."""
    items = sf.sparse_items()
    with dl(items, backend, batch_size=2, shuffle=False) as d:
        got = list(d)
    assert [(b["adj"].layout, tuple(b["adj"].shape)) for b in got] == [
        (torch.sparse_coo, (2, 4, 4))
    ] * 2
    for k, b in enumerate(got):
        want = torch.stack([items.get_item(2 * k + j)["adj"].to_dense() for j in range(2)])
        assert torch.equal(b["adj"].to_dense(), want) and idx(b) == [2 * k, 2 * k + 1]


def test_b35_namedtuple_items_keep_their_type() -> None:
    """B35: namedtuple items give a batch of the same namedtuple type."""
    items = data.dataset(size=2, get_item=lambda i: Pair(torch.tensor([float(i)]), torch.tensor(i)))
    batch = next(iter(data.dataloader(items, batch_size=2, shuffle=False)))
    assert type(batch) is Pair and tuple(batch.x.shape) == (2, 1) and batch.y.tolist() == [0, 1]
