"""Part 5 of the public failure scenarios (``public-bug-scenarios-5.md``, issue 43): B89, B94,
B95, B96, torch's collate errors explained on its front, and regression tests for B83, B84,
B85, B90, B91 and B93 (which passed when reported).

Each ``test_bNN_...`` asserts the case's exact expected value, under every backend it applies
to (the ``backend`` fixture: inline, thread, process) and both fronts (``data.dataloader`` and
torch's signature ``data.DataLoader``); torch 2.13's own loader (fork workers) is the oracle
where it can run the same case. The fixtures are importable (``tests/scenarios5_fixtures.py``)
so process workers import them by reference.
"""

from __future__ import annotations

import gc
import json
import multiprocessing as mp
import time
from typing import Any

import psutil
import pytest
import torch

from clorch_nb import data, widgets
from clorch_nb.errors import CollateError, ConfigError, DefaultCollateError
from tests import scenarios5_fixtures as fx

pytestmark = pytest.mark.timeout(180)

FRONTS = ["dataloader", "DataLoader"]


def make(front: str, dataset: Any, backend: dict[str, Any], **kw: Any) -> data.DataLoader:
    """A loader on ``front`` for ``backend`` (torch's front: ``worker_backend`` only when the
    backend is threads; its workers are processes anyway)."""
    opts = {k: v for k, v in backend.items() if k != "name"}
    if front == "DataLoader":
        if opts.get("worker_backend") == "process":
            del opts["worker_backend"]
        return data.DataLoader(dataset, **opts, **kw)
    kw.setdefault("shuffle", False)
    return data.dataloader(dataset, **opts, **kw)


def torch_batches(dataset: Any, **kw: Any) -> list[Any]:
    """torch 2.13's own loader, fork workers when it has any (the scenarios' oracle)."""
    if kw.get("num_workers", 0) > 0:
        kw.setdefault("multiprocessing_context", "fork")
    return [as_plain(b) for b in torch.utils.data.DataLoader(dataset, **kw)]


def as_plain(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.tolist()
    if isinstance(batch, list | tuple):
        return [as_plain(b) for b in batch]
    return batch


# -- B89: a mix's checkpoint refuses a mix with another plan ------------------------------------


def _sources() -> dict[str, Any]:
    return {
        "a": data.tensor_dataset(torch.zeros(100, 1), torch.arange(100)),
        "b": data.tensor_dataset(torch.zeros(100, 1), torch.arange(100, 200)),
    }


def _targets(batches: Any) -> list[int]:
    return [int(t) for b in batches for t in b["target"]]


@pytest.mark.parametrize("front", FRONTS)
def test_b89_a_mix_state_loads_only_into_the_same_plan(front: str, backend: dict[str, Any]) -> None:
    """B89: 2 batches of ``mix({a, b}, {a: 1, b: 1}, epoch_size=40)``, the state through JSON;
    a mix with other weights, seed or epoch_size refuses it naming the field and both values;
    the same mix resumes exactly (the rest of the uninterrupted epoch: no repeats)."""
    src = _sources()
    m1 = data.mix(src, {"a": 1, "b": 1}, epoch_size=40)
    saver = make(front, m1, backend, batch_size=10)
    it = iter(saver)
    head = _targets([next(it), next(it)])
    state = json.loads(json.dumps(saver.state_dict()))
    saver.close()
    refusals = {
        "mix.weights={'a': 1.0, 'b': 1.0} but this loader has mix.weights={'a': 3.0, 'b': 1.0}":
            data.mix(src, {"a": 3, "b": 1}, epoch_size=40),
        "mix.seed=0 but this loader has mix.seed=1":
            data.mix(src, {"a": 1, "b": 1}, epoch_size=40, seed=1),
        "mix.epoch_size=40 but this loader has mix.epoch_size=50":
            data.mix(src, {"a": 1, "b": 1}, epoch_size=50),
    }  # fmt: skip
    for message, other in refusals.items():
        loader = make(front, other, backend, batch_size=10)
        with pytest.raises(ConfigError, match="saved with " + _escape(message)):
            loader.load_state_dict(state)
        loader.close()
    resumed = make(front, data.mix(src, {"a": 1, "b": 1}, epoch_size=40), backend, batch_size=10)
    resumed.load_state_dict(state)
    rest = _targets(resumed)
    resumed.close()
    whole = _targets(make(front, m1, {"num_workers": 0}, batch_size=10))
    assert head + rest == whole and len(set(whole)) == 40
    assert (sum(t < 100 for t in whole), sum(t >= 100 for t in whole)) == (20, 20)


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_b89_a_mix_of_mixes_refuses_an_inner_mix_with_other_weights() -> None:
    """B89, nested: the inner mix's weights are part of the outer mix's plan
    (``mix['inner'].weights``)."""
    src = _sources()

    def outer(weights: dict[str, float]) -> Any:
        inner = data.mix(src, weights, epoch_size=40)
        return data.mix({"inner": inner, "c": src["a"]}, {"inner": 1, "c": 1}, epoch_size=40)

    saver = data.dataloader(outer({"a": 1, "b": 1}), batch_size=10, shuffle=False)
    it = iter(saver)
    next(it)
    state = json.loads(json.dumps(saver.state_dict()))
    with pytest.raises(ConfigError) as err:
        data.DataLoader(outer({"a": 3, "b": 1}), batch_size=10).load_state_dict(state)
    assert (
        "saved with mix['inner'].weights={'a': 1.0, 'b': 1.0} but this loader has "
        "mix['inner'].weights={'a': 3.0, 'b': 1.0}"
    ) in str(err.value)
    same = data.DataLoader(outer({"a": 1, "b": 1}), batch_size=10)
    same.load_state_dict(state)
    assert len(list(same)) == 3


# -- B94: a view holds its loader weakly ----------------------------------------------------------


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


@pytest.mark.timeout(240)
@pytest.mark.parametrize("front", FRONTS)
def test_b94_a_monitor_does_not_keep_a_dropped_loader(front: str, backend: dict[str, Any]) -> None:
    """B94: three runs of ``loader = DL(Ints(64), batch_size=bs, num_workers=2,
    persistent_workers=True); shown.append(widgets.monitor(loader))``, one epoch each; after
    ``gc.collect()`` and up to 3 s, 0 of the 4 workers of the 2 dropped loaders are alive (and
    the dropped loaders are collected on every backend); the last loader keeps its 2."""
    shown: list[Any] = []
    refs, pids = [], []
    # dataloader() has no persistent_workers= (its workers always persist)
    persistent = (
        {"persistent_workers": True} if backend["num_workers"] and front == "DataLoader" else {}
    )
    for bs in (8, 16, 32):
        loader = make(front, fx.Ints(64), backend, batch_size=bs, **persistent)
        shown.append(widgets.monitor(loader))
        assert sum(len(b) for b in shown[-1]) == 64
        refs.append(__import__("weakref").ref(loader))
        pids.append(set(loader.worker_pids()) if backend["name"] == "process" else set())
    gc.collect()
    dropped = pids[0] | pids[1]
    deadline = time.monotonic() + 3.0
    while _alive(dropped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r() is None for r in refs] == [True, True, False]
    assert len(_alive(dropped)) == 0
    if backend["name"] == "process":
        assert len(dropped) == 4 and len(_alive(pids[2])) == 2
    assert len(shown[-1].timeline().timeline.lanes) >= 1  # the kept loader's views still work
    with pytest.raises(ConfigError, match="was dropped"):
        len(shown[0])
    loader.close()
    del loader
    gc.collect()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("front", FRONTS)
def test_b94_a_monitor_shown_beside_the_loop_does_not_keep_a_dropped_loader(front: str) -> None:
    """B94, the class: ``shown.append(widgets.monitor(loader))`` while the loop iterates the
    loader itself: after ``del loader`` and ``gc.collect()``, every loader is collected and 0
    of their 6 process workers are alive (torch: the workers end with the loader). Failed on
    ``05e145d``: the monitors held their loaders until an epoch run through them ended. (A
    monitor never run lets go at the end of its cell: a kernel test, ``test_kernel_life``.)"""
    shown: list[Any] = []
    refs, pids = [], set()
    persistent = {"persistent_workers": True} if front == "DataLoader" else {}
    process = {"name": "process", "num_workers": 2, "worker_backend": "process"}
    for bs in (8, 16, 32):
        loader = make(front, fx.Ints(64), process, batch_size=bs, **persistent)
        shown.append(widgets.monitor(loader))
        assert sum(len(b) for b in loader) == 64
        refs.append(__import__("weakref").ref(loader))
        pids |= set(loader.worker_pids())
    del loader
    gc.collect()
    deadline = time.monotonic() + 3.0
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r() is None for r in refs] == [True, True, True]
    assert len(pids) == 6 and len(_alive(pids)) == 0
    with pytest.raises(ConfigError, match="was dropped"):
        len(shown[0])


def test_b94_a_monitor_of_a_loader_nobody_else_holds_runs_its_epoch() -> None:
    """``for batch in widgets.monitor(DL(...))``, the loader held by nothing else: the monitor
    holds it until it runs, and the epoch's iterator holds it from there (64 items)."""
    assert sum(len(b) for b in widgets.monitor(data.DataLoader(fx.Ints(64), batch_size=8))) == 64


# -- B95: prefetch_factor below 1 with workers ----------------------------------------------------


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("value", [0, -1])
@pytest.mark.parametrize("workers", ["thread", "process"])
def test_b95_prefetch_factor_below_one_is_refused_at_construction(
    front: str, value: int, workers: str
) -> None:
    """B95: ``prefetch_factor=0`` (or negative) with workers: a ConfigError at construction
    naming prefetch_factor, the value and the fix (torch 2.13: AssertionError "prefetch_factor
    must be greater than 0" at the first iter() for 0)."""
    with pytest.raises(ConfigError) as err:
        make(front, fx.Ints(4), {"num_workers": 2, "worker_backend": workers}, batch_size=2,
             prefetch_factor=value)  # fmt: skip
    text = str(err.value)
    assert f"prefetch_factor={value}" in text and "int >= 1" in text


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize(
    ("name", "value", "extra"),
    [("num_workers", "2", {}), ("num_workers", 1.5, {}),
     ("prefetch_factor", "2", {"num_workers": 2}), ("prefetch_factor", 2.5, {"num_workers": 2}),
     ("timeout", "5", {"num_workers": 2}), ("timeout", float("nan"), {"num_workers": 2}),
     ("timeout", float("inf"), {"num_workers": 2})],
)  # fmt: skip
def test_b95_a_count_of_the_wrong_type_is_named_on_both_fronts(
    front: str, name: str, value: Any, extra: dict[str, Any]
) -> None:
    """B95, the class: ``num_workers="2"`` (a string from a config file), a float count, a
    string timeout: a ConfigError at construction naming the argument and the value, on both
    fronts; on torch's front also a TypeError, as torch's own (which is a bare "'<' not
    supported between instances of 'str' and 'int'": the probe of 2026-12-06)."""
    if front == "dataloader" and name == "timeout":  # clorch_nb's own front: milliseconds
        name, value = "timeout_ms", value if isinstance(value, float) else "5000"
    with pytest.raises(ConfigError) as err:
        make(front, fx.Ints(4), {}, batch_size=2, **{**extra, name: value})
    assert f"{name}={value!r}" in str(err.value)
    if front == "DataLoader" and (name != "timeout" or isinstance(value, str)):
        assert isinstance(err.value, TypeError)  # a wrong type (nan, inf: a wrong value)
    if front == "DataLoader" and isinstance(value, str):
        with pytest.raises(TypeError):  # the oracle: torch refuses a string too (its own words)
            torch.utils.data.DataLoader(fx.Ints(4), batch_size=2, **{**extra, name: value})


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # torch own __del__
def test_b95_torch_refuses_prefetch_factor_0_too() -> None:
    """The oracle: torch 2.13 refuses it at the first ``iter()`` (no worker starts)."""
    loader = torch.utils.data.DataLoader(fx.Ints(4), batch_size=2, num_workers=2,
                                         prefetch_factor=0)  # fmt: skip
    with pytest.raises((AssertionError, ValueError), match="prefetch_factor"):
        iter(loader)


# -- B96: a module global set at run time reaches process workers ----------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("front", FRONTS)
def test_b96_a_module_global_set_at_run_time_reaches_the_workers(
    front: str, backend: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """B96: ``fx.SCALE = 10.0``, then ``ScaledByGlobal()`` (items ``i * SCALE``): torch 2.13 (fork
    workers) and inline give ``[[0, 10, ..., 70]]``; every backend does. Set again between
    epochs, the next epoch reads the new value (torch's non-persistent workers do)."""
    monkeypatch.setattr(fx, "SCALE", 10.0)
    expected = [[float(10 * i) for i in range(8)]]
    assert torch_batches(fx.ScaledByGlobal(), batch_size=8, num_workers=2) == expected
    assert torch_batches(fx.ScaledByGlobal(), batch_size=8) == expected
    loader = make(front, fx.ScaledByGlobal(), backend, batch_size=8)
    assert [as_plain(b) for b in loader] == expected
    monkeypatch.setattr(fx, "SCALE", 3.0)
    assert [as_plain(b) for b in loader] == [[float(3 * i) for i in range(8)]]
    assert torch_batches(fx.ScaledByGlobal(), batch_size=8, num_workers=2) == [
        [float(3 * i) for i in range(8)]
    ]
    loader.close()


@pytest.mark.timeout(240)
def test_b96_a_global_read_through_a_helper_reaches_the_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B96, the class: the global is read by a helper function of the module the dataset's
    method calls, not by the method itself."""
    monkeypatch.setattr(fx, "OFFSET", 100)
    loader = data.DataLoader(fx.OffsetByHelper(), batch_size=4, num_workers=2)
    assert [as_plain(b) for b in loader] == [[100, 101, 102, 103]]
    assert torch_batches(fx.OffsetByHelper(), batch_size=4, num_workers=2) == [[100, 101, 102, 103]]
    loader.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("cls", ["ScaledByClass", "ScaledByBase"])
def test_b96_a_class_attribute_set_at_run_time_reaches_the_workers(
    front: str, cls: str, backend: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """B96, the class: ``ScaledByClass.FACTOR = 10.0`` on an importable class (read through
    ``type(self)``, or through ``self`` by a subclass): torch 2.13 (fork workers) gives
    ``[[0, 10, 20, 30]]``, and so does every backend; set again between epochs, the next epoch
    reads the new value. Failed on ``05e145d`` with process workers (``[[0, 1, 2, 3]]``)."""
    dataset_class = getattr(fx, cls)
    monkeypatch.setattr(fx.ScaledByClass, "FACTOR", 10.0)
    expected = [[0.0, 10.0, 20.0, 30.0]]
    assert torch_batches(dataset_class(), batch_size=4, num_workers=2) == expected
    loader = make(front, dataset_class(), backend, batch_size=4)
    assert [as_plain(b) for b in loader] == expected
    monkeypatch.setattr(fx.ScaledByClass, "FACTOR", 3.0)
    assert torch_batches(dataset_class(), batch_size=4, num_workers=2) == [[0.0, 3.0, 6.0, 9.0]]
    assert [as_plain(b) for b in loader] == [[0.0, 3.0, 6.0, 9.0]]
    loader.close()


# -- torch's collate errors on its front, explained ------------------------------------------------


def test_a_wrong_shaped_item_is_explained_on_torchs_front(backend: dict[str, Any]) -> None:
    """``data.DataLoader(OddShape(16, odd=9), batch_size=4)``: batch 2 holds item 9 of shape
    (2, 2) among (2, 3): a ``DefaultCollateError`` (a CollateError, and a RuntimeError as
    torch's) naming position 1 and both shapes, with torch's own message after it; the epoch
    goes on with batch 3, as torch's does. ``data.dataloader`` raises its CollateError."""
    text = (
        "cannot stack the items themselves: tensors differ in shape: positions 0, 2, 3 shape "
        "(2, 3); position 1 shape (2, 2)"
    )
    for front in FRONTS:
        loader = make(front, fx.OddShape(), backend, batch_size=4)
        it = iter(loader)
        assert [as_plain(next(it))[0][0][0] for _ in range(2)] == [0.0, 4.0]
        want = DefaultCollateError if front == "DataLoader" else CollateError
        with pytest.raises(want) as err:
            next(it)
        assert text in str(err.value) and err.value.positions == (1,)
        if front == "DataLoader":
            assert isinstance(err.value, RuntimeError) and "torch's default_collate" in str(
                err.value
            )
        assert as_plain(next(it))[0][0][0] == 12.0
        loader.close()
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        torch_batches(fx.OddShape(), batch_size=4)


# -- regressions: B83, B84, B85, B90, B91, B93 ---------------------------------------------------


@pytest.mark.timeout(240)
def test_b83_persistent_iterable_workers_keep_their_copy() -> None:
    """B83: ``EpochStream`` (each worker counts its ``__iter__`` calls), ``batch_size=None``,
    2 persistent workers, 3 epochs: torch 2.13 gives ``[[(0, 1), (1, 1)], [(0, 2), (1, 2)],
    [(0, 3), (1, 3)]]``."""
    kw: dict[str, Any] = {"batch_size": None, "num_workers": 2, "persistent_workers": True}
    theirs = torch.utils.data.DataLoader(fx.EpochStream(), multiprocessing_context="fork", **kw)
    ours = data.DataLoader(fx.EpochStream(), **kw)
    expected = [[(0, e), (1, e)] for e in (1, 2, 3)]
    assert [[tuple(as_plain(b)) for b in theirs] for _ in range(3)] == expected
    assert [[tuple(as_plain(b)) for b in ours] for _ in range(3)] == expected
    ours.close()


@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore:Length of IterableDataset")  # torch's warning, both loaders
@pytest.mark.parametrize("workers", [0, 2])
def test_b84_a_sized_iterable_len_and_batches(workers: int) -> None:
    """B84: ``SplitRange(10, 10)``, ``batch_size=4``: 0 workers ``3, [[0,1,2,3],[4,5,6,7],
    [8,9]]``; 2 workers ``3, [[0,2,4,6],[1,3,5,7],[8],[9]]`` (torch 2.13)."""
    expected = {
        0: (3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]),
        2: (3, [[0, 2, 4, 6], [1, 3, 5, 7], [8], [9]]),
    }[workers]
    ours = data.DataLoader(fx.SplitRange(10, 10), batch_size=4, num_workers=workers)
    assert (len(ours), [as_plain(b) for b in ours]) == expected
    assert (len(ours), torch_batches(fx.SplitRange(10, 10), batch_size=4, num_workers=workers)) \
        == expected  # fmt: skip
    ours.close()


@pytest.mark.timeout(240)
def test_b85_any_order_iterable_in_process_workers() -> None:
    """B85: ``SplitRange(12, 12)``, ``batch_size=2``, 2 process workers, ``in_order=False``:
    6 batches holding 0..11 once each."""
    loader = data.DataLoader(fx.SplitRange(12, 12), batch_size=2, num_workers=2, in_order=False)
    batches = [as_plain(b) for b in loader]
    assert len(batches) == 6 and sorted(i for b in batches for i in b) == list(range(12))
    loader.close()


@pytest.mark.timeout(240)
def test_b90_unusual_collate_outputs_cross_process_workers_as_torchs() -> None:
    """B90: ``exotic_collate`` through 2 process workers: every field identical to torch 2.13's
    (dtype, shape, values); the numpy field is writable."""
    kw: dict[str, Any] = {"batch_size": 4, "num_workers": 2, "collate_fn": fx.exotic_collate}
    theirs = list(torch.utils.data.DataLoader(fx.Ints(8), multiprocessing_context="fork", **kw))
    ours = data.DataLoader(fx.Ints(8), **kw)
    mine = list(ours)
    assert len(mine) == len(theirs) == 2
    for a, b in zip(mine, theirs, strict=True):
        assert a.keys() == b.keys()
        for key in b:
            x, y = a[key], b[key]
            if isinstance(y, torch.Tensor):
                assert (x.dtype, x.shape) == (y.dtype, y.shape), key
                assert torch.equal(x, y), key
            elif key == "numpy":
                assert x.dtype == y.dtype and x.tolist() == y.tolist() and x.flags.writeable
            else:
                assert x == y, key
    ours.close()


@pytest.mark.timeout(240)
def test_b91_a_dataframe_sent_by_value() -> None:
    """B91: ``Frame()`` (20,000 rows; ``iloc``, ``sample``, ``groupby`` in ``__getitem__``),
    ``batch_size=4, sampler=range(8)``, 2 process workers: ``[[1, 3, 5, 7], [9, 11, 13, 15]]``
    (torch 2.13)."""
    pytest.importorskip("pandas")
    loader = data.DataLoader(fx.Frame(), batch_size=4, sampler=range(8), num_workers=2)
    assert [as_plain(b) for b in loader] == [[1, 3, 5, 7], [9, 11, 13, 15]]
    loader.close()


@pytest.mark.slow  # a spawn start imports torch in each worker: about 4 s
@pytest.mark.timeout(240)
@pytest.mark.parametrize("context", ["spawn-object", "forkserver-object", "spawn"])
def test_b93_multiprocessing_context_as_an_object(context: str) -> None:
    """B93: ``multiprocessing_context`` given as ``mp.get_context("spawn")``,
    ``mp.get_context("forkserver")`` or ``"spawn"``: ``[[0, 1], [2, 3]]`` each (torch 2.13)."""
    ctx: Any = mp.get_context(context.split("-")[0]) if context.endswith("object") else context
    loader = data.DataLoader(fx.Ints(4), batch_size=2, num_workers=2, multiprocessing_context=ctx)
    assert [as_plain(b) for b in loader] == [[0, 1], [2, 3]]
    loader.close()
