"""Run one :class:`~tests.harness.configs.Config` under a loader class and return a comparable
:class:`Record`: what construction, ``len()``, every ``next()`` of every epoch, the user's objects
afterwards and the leftovers (processes, ``/dev/shm`` entries, fds, threads) were.

:func:`run_all` runs the configuration under torch's ``DataLoader`` (fork workers, the oracle),
under ``clorch_nb.data.DataLoader``, and the extra oracle runs the documented-difference table
(:data:`tests.harness.compare.DOCUMENTED`) asks for.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import random
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil
import torch
import torch.utils.data as tud

from tests.harness import fixtures as fx
from tests.harness.configs import Config

MAX_OUTCOMES = 200  # next() calls per epoch before the harness calls it endless
SHM_DIR = "/dev/shm"


# --- canonical, hashable forms of batches -------------------------------------------------------


def canon(x: Any) -> Any:
    """A hashable, comparable form of a batch (types, dtypes, shapes and values)."""
    if isinstance(x, torch.Tensor):
        return ("T", str(x.dtype), tuple(x.shape), _nested(x.tolist()))
    if isinstance(x, np.ndarray):
        return ("A", str(x.dtype), x.shape, _nested(x.tolist()))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (
            "C",
            type(x).__name__,
            tuple((f.name, canon(getattr(x, f.name))) for f in dataclasses.fields(x)),
        )
    if isinstance(x, dict):
        return ("D", type(x).__name__, tuple(sorted((str(k), canon(v)) for k, v in x.items())))
    if isinstance(x, list):
        return ("L", tuple(canon(v) for v in x))
    if isinstance(x, tuple):
        return ("U", type(x).__name__, tuple(canon(v) for v in x))
    if isinstance(x, np.generic):
        return ("N", str(x.dtype), x.item())
    if isinstance(x, str | int | float | bool) or x is None:
        return (type(x).__name__, x)
    return ("?", type(x).__name__, repr(x))


def _nested(v: Any) -> Any:
    return tuple(_nested(e) for e in v) if isinstance(v, list) else v


def mask_rng(c: Any) -> Any:
    """``c`` with every ``"rng"`` field (draws from the global RNGs) replaced by a marker."""
    if isinstance(c, tuple) and c[:1] == ("D",):
        return ("D", c[1], tuple((k, ("masked",) if k == "rng" else mask_rng(v)) for k, v in c[2]))
    if isinstance(c, tuple) and c[:1] in (("C",), ("U",)):
        return (
            (c[0], c[1], tuple(mask_rng(v) for v in c[2]))
            if c[0] == "U"
            else ("C", c[1], tuple((k, mask_rng(v)) for k, v in c[2]))
        )
    if isinstance(c, tuple) and c[:1] == ("L",):
        return ("L", tuple(mask_rng(v) for v in c[1]))
    return c


def error_of(exc: BaseException) -> tuple[str, str, str]:
    """(type name, the first type of its MRO not defined by clorch_nb, message's first 300
    characters): errors compare by the second, so clorch_nb's ``ConfigError`` matches torch's
    ``ValueError``."""
    base = next(t for t in type(exc).__mro__ if not t.__module__.startswith("clorch_nb"))
    return (type(exc).__name__, base.__name__, str(exc)[:300])


# --- building one loader ------------------------------------------------------------------------


@dataclasses.dataclass
class Built:
    dataset: Any
    kwargs: dict[str, Any]
    storages: list[Any]  # the fixtures' storage objects the user holds (checked afterwards)
    epoch_hooks: list[Any]  # objects with set_epoch the user calls between epochs
    before: dict[str, Any]  # identities and pointers of the user's objects before the run
    # the torch oracle runs without persistent workers (compare.plan), yet must draw its base
    # seed once, as persistent torch workers do (OneBaseSeed)
    one_base_seed: bool = False


class OneBaseSeed(tud.DataLoader):  # type: ignore[type-arg]
    """torch's DataLoader whose base seed is drawn from ``generator`` (or the global RNG) at its
    first ``iter()`` only, as with ``persistent_workers=True`` (torch resets that iterator
    instead of building a new one): later ones draw it from a throwaway generator, so the
    sampler's draws from ``generator`` or the global RNG are a persistent loader's."""

    def __iter__(self) -> Any:
        if not getattr(self, "_drew_base_seed", False):
            self._drew_base_seed = True
            return super().__iter__()
        kept = self.generator
        self.generator = torch.Generator().manual_seed(0)
        try:
            return super().__iter__()  # the base seed (and prefetching workers' first indices)
        finally:
            self.generator = kept


def make_dataset(cfg: Config) -> tuple[Any, list[Any]]:
    raise_at = frozenset(cfg.raise_at)
    if cfg.dataset == "map":
        ds = fx.MapDS(cfg.n, cfg.item, cfg.behavior, raise_at)
        return ds, [ds]
    if cfg.dataset == "iter":
        ds = fx.IterDS(cfg.n, cfg.item, cfg.behavior, raise_at)
        return ds, [ds]
    if cfg.dataset == "iter_sized":
        ds = fx.SizedIterDS(cfg.n, cfg.item, cfg.behavior, raise_at)
        return ds, [ds]
    if cfg.dataset == "subset":
        inner = fx.MapDS(cfg.n + 2, cfg.item, cfg.behavior, raise_at)
        return tud.Subset(inner, list(range(1, cfg.n + 1))[::-1]), [inner]
    if cfg.dataset == "concat":
        k = cfg.n // 2
        a = fx.MapDS(k, cfg.item, cfg.behavior, raise_at)
        b = fx.MapDS(cfg.n - k, cfg.item, cfg.behavior, frozenset(i - k for i in raise_at))
        return tud.ConcatDataset([a, b]), [a, b]
    if cfg.dataset == "tensor_dataset":
        from clorch_nb import data

        st = fx.MapDS(cfg.n, "tensor", "plain", frozenset())
        x = st.t[: cfg.n]
        st.t_view = x  # the user's tensors, as passed
        st.targets = torch.arange(cfg.n)
        return data.tensor_dataset(x, st.targets), [st]
    raise AssertionError(cfg.dataset)


def make_sampler_kwargs(cfg: Config, ds: Any) -> dict[str, Any]:
    s, n = cfg.sampler, cfg.n
    gen = torch.Generator().manual_seed(1000 + cfg.seed)
    if s == "default":
        return {"shuffle": False} if cfg.seed % 2 else {}
    if s == "shuffle":
        return {"shuffle": True, "generator": gen}
    if s == "random":
        return {"sampler": tud.RandomSampler(ds, generator=gen)}
    if s == "distributed":
        r, rank = cfg.replicas
        return {
            "sampler": tud.DistributedSampler(
                ds, num_replicas=r, rank=rank, shuffle=cfg.dist_shuffle, seed=cfg.seed
            )
        }
    if s == "list":
        order = [(i * 5 + cfg.seed) % n for i in range(n)] + ([0] if n else [])
        return {"sampler": order}
    if s == "keys":
        return {"sampler": [f"k{(i * 3) % n}" for i in range(n)]}
    if s == "batch":
        return {"batch_sampler": tud.BatchSampler(tud.SequentialSampler(ds), 2, cfg.drop_last)}
    if s == "batch_random":
        return {
            "batch_sampler": tud.BatchSampler(
                tud.RandomSampler(ds, generator=gen), 3, cfg.drop_last
            )
        }
    if s == "batch_list":
        idx = list(range(n))
        return {"batch_sampler": [idx[i : i + 1 + i % 3] for i in range(0, n, 2)]}
    raise AssertionError(s)


def build(cfg: Config, lib: str) -> Built:
    """The dataset and the keyword arguments of one loader of ``cfg`` (``lib``: "torch" or
    "clorch"); the oracle's adjustments (fork, documented differences) are made by the caller."""
    ds, storages = make_dataset(cfg)
    kw: dict[str, Any] = make_sampler_kwargs(cfg, ds)
    if cfg.sampler not in ("batch", "batch_random", "batch_list"):
        kw["batch_size"] = cfg.batch_size
        kw["drop_last"] = cfg.drop_last
    kw["num_workers"] = cfg.num_workers
    if cfg.num_workers:
        kw["persistent_workers"] = cfg.persistent_workers
        kw["in_order"] = cfg.in_order
        if lib == "torch":
            kw["multiprocessing_context"] = "fork"
        else:
            kw["worker_backend"] = cfg.backend
    if cfg.prefetch_factor is not None:
        kw["prefetch_factor"] = cfg.prefetch_factor
    if cfg.pad:
        kw["collate_fn"] = fx.pad_collate
    hooks: list[Any] = []
    if cfg.set_epoch:
        hooks += [s for s in storages]
        sampler = kw.get("sampler")
        if hasattr(sampler, "set_epoch"):
            hooks.append(sampler)
    before = {"storages": [_identity(st) for st in storages]}
    return Built(ds, kw, storages, hooks, before)


def _identity(st: Any) -> dict[str, Any]:
    return {
        "t": st.t,
        "a": st.a,
        "t_ptr": st.t.data_ptr(),
        "a_ptr": st.a.ctypes.data,
        "alias_ptr": st.alias.data_ptr(),
        "big_t_ptr": st.big_t.data_ptr(),
    }


def user_objects(b: Built) -> list[dict[str, Any]]:
    """What the user's objects look like after the run: values, identity, aliasing, sharing and
    writability of each storage's tensors and arrays."""
    out = []
    for st, before in zip(b.storages, b.before["storages"], strict=True):
        facts = {
            "t": canon(st.t),
            "a": canon(st.a),
            "counts": canon(st.counts),
            "tcounts": canon(st.tcounts),
            "epoch": st.epoch,
            "t is same object": st.t is before["t"],
            "a is same object": st.a is before["a"],
            "t data_ptr unchanged": st.t.data_ptr() == before["t_ptr"],
            "a data unchanged": st.a.ctypes.data == before["a_ptr"],
            "alias shares memory with a": bool(np.shares_memory(st.alias.numpy(), st.a)),
            "t.is_shared()": st.t.is_shared(),
            "alias.is_shared()": st.alias.is_shared(),
            "a writeable": bool(st.a.flags.writeable),
            "big_a": canon(st.big_a[:16]),
            "big_alias shares memory with big_a": bool(
                np.shares_memory(st.big_alias.numpy(), st.big_a)
            ),
            "big_alias.is_shared()": st.big_alias.is_shared(),
            "big_t.is_shared()": st.big_t.is_shared(),
            "big_t data_ptr unchanged": st.big_t.data_ptr() == before["big_t_ptr"],
            "big_a writeable": bool(st.big_a.flags.writeable),
        }
        if hasattr(st, "t_view"):
            facts["tensor_dataset x.is_shared()"] = st.t_view.is_shared()
            facts["tensor_dataset targets.is_shared()"] = st.targets.is_shared()
            facts["tensor_dataset x shares t"] = st.t_view.data_ptr() == st.t.data_ptr() or not len(
                st.t_view
            )
        out.append(facts)
    return out


# --- leftovers ----------------------------------------------------------------------------------


def _helpers() -> set[int]:
    from multiprocessing import forkserver, resource_tracker

    pids = {
        getattr(forkserver._forkserver, "_forkserver_pid", None),
        getattr(resource_tracker._resource_tracker, "_pid", None),
    }
    return {p for p in pids if p}


def _children() -> set[int]:
    try:
        return {
            p.pid
            for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE
        }
    except psutil.Error:
        return set()


def _shm() -> set[str]:
    try:
        return {f for f in os.listdir(SHM_DIR) if f.startswith(f"clorch_nb-{os.getpid()}-")}
    except OSError:
        return set()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def snapshot() -> dict[str, Any]:
    return {
        "procs": _children(),
        "shm": _shm(),
        "fds": _fds(),
        "threads": set(threading.enumerate()),
    }


def leftovers(before: dict[str, Any], grace_s: float = 3.0) -> dict[str, Any]:
    """What this run left: child processes, ``/dev/shm/clorch_nb-<pid>-*`` entries, open fds
    and threads more than before (after a collection and up to ``grace_s`` for exits)."""
    gc.collect()
    deadline = time.monotonic() + grace_s
    while True:
        procs = _children() - before["procs"] - _helpers()
        shm = _shm() - before["shm"]
        fds = _fds() - before["fds"]
        threads = [t for t in threading.enumerate() if t not in before["threads"] and t.is_alive()]
        if not (procs or shm or fds > 0 or threads) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return {
        "procs": len(procs),
        "shm": sorted(shm),
        "fds": max(fds, 0),
        "threads": sorted(t.name for t in threads),
    }


# --- one run ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Record:
    """One loader's run of a configuration."""

    lib: str
    init: tuple[str, str, str] | None = None  # the constructor's error
    length: Any = None  # ("ok", len(loader)) or ("error", ...)
    length_iter: Any = None  # len(iter(loader)) of the first epoch
    epochs: list[list[Any]] = dataclasses.field(default_factory=list)  # next() outcomes
    endless: bool = False
    state_error: tuple[str, str, str] | None = None  # state_dict/load refused
    after: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    left: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0


def _seed_globals(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def loader_class(lib: str) -> Callable[..., Any]:
    if lib == "torch":
        return tud.DataLoader
    from clorch_nb.data import DataLoader

    return DataLoader


def run(
    cfg: Config,
    lib: str,
    adjust: Callable[[Built], None] | None = None,
    *,
    resume: bool = False,
    check_left: bool = True,
) -> Record:
    """Run ``cfg`` under ``lib`` ("torch" or "clorch"); ``adjust`` edits the built loader
    arguments (the oracle's documented adjustments); ``resume``: at ``cfg.resume_at`` take
    ``state_dict()``, build a fresh loader, ``load_state_dict()`` it and go on."""
    t0 = time.monotonic()
    rec = Record(lib)
    before = snapshot() if check_left else None
    cls = loader_class(lib)
    try:
        b = build(cfg, lib)  # a sampler's constructor may refuse (RandomSampler of 0 items)
    except Exception as e:  # noqa: BLE001
        rec.init = error_of(e)
        return rec
    if adjust is not None:
        adjust(b)

    def make(fresh: bool = False, epoch: int = 0) -> Any:
        # fresh: a restarted job's loader, with new sampler objects (set_epoch'd as its loop does)
        kw = b.kwargs
        if fresh:
            old = kw.get("sampler")
            kw = {**kw, **make_sampler_kwargs(cfg, b.dataset)}
            b.epoch_hooks = [h for h in b.epoch_hooks if h is not old]
            if cfg.set_epoch and hasattr(kw.get("sampler"), "set_epoch"):
                b.epoch_hooks.append(kw["sampler"])
                kw["sampler"].set_epoch(epoch)
        _seed_globals(cfg.seed)
        return (OneBaseSeed if b.one_base_seed and cls is tud.DataLoader else cls)(b.dataset, **kw)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            loader = make()
        except Exception as e:  # noqa: BLE001 - the outcome being compared
            rec.init = error_of(e)
            loader = None
        if loader is not None:
            _drive(cfg, b, loader, make, rec, resume)
        loader = None
        rec.after = user_objects(b)
    if before is not None:
        rec.left = leftovers(before)
    else:
        gc.collect()  # a torch loader's persistent workers end with its cycle, not frozen
    gc.freeze()  # what survives is walked by no later collection (keeps gc.collect() cheap)
    rec.seconds = time.monotonic() - t0
    return rec


def _outcome_len(f: Callable[[], Any]) -> Any:
    try:
        return ("ok", f())
    except Exception as e:  # noqa: BLE001
        return ("error", *error_of(e)[:2])


def _drive(
    cfg: Config, b: Built, loader: Any, make: Callable[[], Any], rec: Record, resume: bool
) -> None:
    rec.length = _outcome_len(lambda: len(loader))
    pending = cfg.resume_at if resume else None
    it: Any = None
    try:
        for e in range(cfg.epochs):
            for h in b.epoch_hooks:
                h.set_epoch(e)
            outs: list[Any] = []
            rec.epochs.append(outs)
            try:
                it = iter(loader)
            except Exception as exc:  # noqa: BLE001
                outs.append(("iter-error", *error_of(exc)))
                continue
            if e == 0:
                rec.length_iter = _outcome_len(it.__len__)
            if cfg.consume == "list":
                try:
                    outs += [("batch", canon(x)) for x in list(it)]
                except Exception as exc:  # noqa: BLE001
                    outs.append(("list-error", *error_of(exc)))
                continue
            while True:
                if pending is not None and pending == (e, len(outs)):
                    pending = None
                    it = None
                    if cfg.resume_via == "skip":  # accelerate's helper over a restarted job's
                        loader = None  # loader, for the rest of this epoch (then the loader)
                        gc.collect()
                        loader = make(True, e)
                        it = iter(skip_first_batches(loader, len(outs)))
                        continue
                    loader, it = _resume(loader, functools.partial(make, True, e), rec)
                    if loader is None:
                        return
                    it = iter(loader)
                try:
                    x = next(it)
                except StopIteration:
                    break
                except Exception as exc:  # noqa: BLE001
                    outs.append(("error", *error_of(exc)))
                else:
                    outs.append(("batch", canon(x)))
                if (
                    len(outs) > cfg.n + 5  # more outcomes than any epoch of n items has
                    and outs[-1][0] == "error"
                    and outs[-1] == outs[-2] == outs[-3]
                ):
                    break  # an epoch that ended early raises on every later next() (README)
                if len(outs) >= MAX_OUTCOMES:
                    rec.endless = True
                    break
            if pending is not None and pending[0] == e:
                # the resume point is past this epoch's end: the state after the loop
                pending = None
                it = None
                if cfg.resume_via == "skip":  # a restarted job at the next epoch's start
                    loader = None
                    gc.collect()
                    loader = make(True, e + 1)
                    continue
                loader, it = _resume(loader, functools.partial(make, True, e + 1), rec)
                if loader is None:
                    return
    finally:
        it = None


def skip_first_batches(loader: Any, num_batches: int) -> Any:
    """accelerate's mid-epoch resume helper (a torch ``DataLoader`` over the loader's attributes
    whose batch sampler skips the first ``num_batches``)."""
    from accelerate import skip_first_batches as skip

    return skip(loader, num_batches)


def _resume(loader: Any, make: Callable[[], Any], rec: Record) -> tuple[Any, Any]:
    """A restarted job: the loader's state, and the global RNGs' as a framework's checkpoint
    keeps them (Lightning's and accelerate's save and restore them), put into a new loader
    (torch's front draws later epochs' seeds from the global RNG, as torch does)."""
    try:
        state = loader.state_dict()
        rngs = torch.get_rng_state(), np.random.get_state(), random.getstate()
        loader = None
        gc.collect()
        fresh = make()
        torch.set_rng_state(rngs[0])
        np.random.set_state(rngs[1])
        random.setstate(rngs[2])
        fresh.load_state_dict(state)
    except Exception as e:  # noqa: BLE001
        rec.state_error = error_of(e)
        return None, None
    return fresh, None


def prepare() -> None:
    """Start what lives for the whole interpreter before the first measured run (clorch_nb's
    forkserver and whatever a first process loader opens once), so a run's leftovers are its
    own."""
    from clorch_nb import data

    data.start_forkserver(background=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for backend in ("process", "thread"):
            cfg = Config(num_workers=1, backend=backend, n=2)
            run(cfg, "clorch", check_left=False)
            run(cfg, "torch", check_left=False)
    gc.collect()
    gc.freeze()
