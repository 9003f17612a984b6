"""Compare clorch_nb's run of a configuration with its oracle, and the documented-difference
table.

The oracle is torch 2.13's ``DataLoader`` with fork workers, except where clorch_nb differs on
purpose: every such exemption is one row of :data:`DOCUMENTED`, which cites the README's row
("These behave differently on purpose" and the list after it) and says what the harness compares
instead. Nothing else is ever marked expected.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

from clorch_nb import errors
from tests.harness import fixtures as fx
from tests.harness.configs import Config
from tests.harness.run import Built, Record, mask_rng, run


@dataclasses.dataclass(frozen=True)
class Documented:
    """One documented difference: when it applies and what the harness compares instead."""

    id: str
    readme: str  # the README row it cites (section "These behave differently on purpose" etc.)
    applies: Callable[[Config], bool]
    instead: str


def _rng_map(c: Config) -> bool:
    return c.behavior == "rng" and not c.stream and not (c.workers and c.backend == "thread")


DOCUMENTED: dict[str, Documented] = {
    d.id: d
    for d in [
        Documented(
            "no-fork",
            '"Process workers, as torch\'s": `"fork"` is refused: a notebook kernel is not safe to '
            "fork. (They use forkserver or spawn, never fork.)",
            lambda c: c.workers,
            'torch runs with multiprocessing_context="fork" (the semantic oracle); clorch_nb gets '
            "no "
            "multiprocessing_context (its forkserver)",
        ),
        Documented(
            "global-rng-per-batch",
            '"`worker_init_fn` and seeds": the global RNGs are seeded before *every batch* from '
            "(seed, epoch, batch position) ... augmentation is the same for any `num_workers`.",
            lambda c: c.behavior == "rng",
            "the global-RNG draws are masked against torch; map-style items are compared exactly "
            "with clorch_nb's own inline run (num_workers=0) of the same configuration",
        ),
        Documented(
            "rng-threads",
            '"Checkpoint and resume": random augmentation that uses the global RNGs is seeded per '
            "batch from (seed, epoch, position) ... (thread workers: draw from "
            '`data.get_worker_info().torch_generator()`); "`IterableDataset`": worker `w` is '
            "seeded with `base_seed + w` where the base seed is drawn at each `iter()`",
            lambda c: c.behavior == "rng" and (c.stream or (c.workers and c.backend == "thread")),
            "thread workers' and streams' global-RNG draws are masked everywhere (no exact oracle: "
            "threads share one global RNG; a stream's per-worker seeds come from base_seed + w, "
            "drawn after clorch_nb's loader seed)",
        ),
        Documented(
            "keys-are-integers",
            '"Keys are integers": a sampler must yield dataset indices: one that yields other keys '
            "... is refused naming the key it yielded.",
            lambda c: c.sampler == "keys" and c.n > 0,
            "clorch_nb must raise an error naming the first key (at construction, iter() or the "
            "first next()); torch, which passes the key to __getitem__, is not the oracle",
        ),
        Documented(
            "refused-when-made",
            '"Refused when the loader is made": `prefetch_factor` below 1 with workers is refused '
            "when the loader is made, naming it (torch's iter() fails with an AssertionError).",
            lambda c: c.prefetch_factor is not None and c.prefetch_factor < 1 and c.workers,
            "clorch_nb must refuse it at construction naming prefetch_factor, and torch must fail "
            "(at iter()); nothing after is compared",
        ),
        Documented(
            "set-epoch-called",
            '"State between epochs": workers persist, so a dataset\'s `set_epoch(epoch)` is called '
            "before each epoch in every worker, and `get_worker_info().epoch` is set.",
            # the fixtures with set_epoch, and the torch wrappers that hold them (the loader passes
            # set_epoch on to the datasets a Subset or ConcatDataset holds)
            lambda c: c.dataset in ("map", "iter", "iter_sized", "subset", "concat"),
            "the torch oracle's loop calls dataset.set_epoch(epoch) before each epoch itself, and "
            "runs with persistent_workers=False when it has workers (torch's persistent workers "
            "keep the epoch they forked with)",
        ),
        Documented(
            "threads-share-dataset",
            '"`worker_init_fn` and seeds": thread workers share the dataset object; '
            '"Thread safety": '
            "thread workers share the dataset.",
            lambda c: c.workers and c.backend == "thread",
            "the user's objects afterwards are compared with torch's inline run (num_workers=0), "
            "where the loader also writes into the user's own dataset",
        ),
        Documented(
            "threads-see-parent-state",
            '"`worker_init_fn` and seeds": thread workers share the dataset object (hence, with '
            "persistent_workers=True, they read what the user's loop changes between epochs, "
            "which torch's persistent fork workers do not)",
            lambda c: c.workers and c.backend == "thread" and c.persistent_workers and c.set_epoch,
            "the torch oracle runs with persistent_workers=False (its fork workers then see the "
            "parent's state of each epoch, as shared threads do)",
        ),
        Documented(
            "in-order-false-distributed-state",
            '"`in_order=False`": with a `distributed_sampler` it (state_dict) is refused mid-epoch',
            lambda c: c.workers and not c.in_order and c.sampler == "distributed",
            "a resume's state_dict() may be refused (checked: it raises, or it resumes exactly)",
        ),
        Documented(
            "dict-numbers-to-lists",
            '"Checklist for moving to `data.dataloader`" / "Collation": integer and float '
            "fields of "
            "dict items come back as Python lists on `data.dataloader` only",
            lambda c: False,
            "not exercised: the harness drives `data.DataLoader` (torch's front), whose default "
            "collate_fn is torch's default_collate",
        ),
    ]
}


@dataclasses.dataclass
class Plan:
    """What to run and compare for one configuration, from :data:`DOCUMENTED`."""

    rows: list[str]
    torch_adjust: Callable[[Built], None] | None
    mask: bool  # mask global-RNG draws against torch
    inline_oracle: bool  # also compare exactly with clorch_nb's inline run
    items: str  # "ordered", "multiset" (batches: in_order=False)
    after_oracle: str  # "torch" or "torch_inline"
    keys_refused: bool
    state_may_refuse: bool
    refused_when_made: bool = False


def plan(cfg: Config) -> Plan:
    rows = [d.id for d in DOCUMENTED.values() if d.applies(cfg)]
    adjust = None
    nonpersistent = {"set-epoch-called", "threads-see-parent-state"}
    if nonpersistent & set(rows):

        def adjust(b: Built) -> None:
            if "set-epoch-called" in rows:
                loop_sets_dataset_epoch(b)
            if b.kwargs.get("persistent_workers"):
                b.kwargs["persistent_workers"] = False
                b.one_base_seed = True  # its RNG draws stay a persistent loader's

    items = "ordered"
    if cfg.workers and not cfg.in_order:
        items = "multiset"  # torch's own in_order=False: whichever batch is built first
    return Plan(
        rows=rows,
        torch_adjust=adjust,
        mask=cfg.behavior == "rng",
        inline_oracle=_rng_map(cfg) and cfg.workers,
        items=items,
        after_oracle="torch_inline" if "threads-share-dataset" in rows else "torch",
        keys_refused="keys-are-integers" in rows,
        refused_when_made="refused-when-made" in rows,
        state_may_refuse="in-order-false-distributed-state" in rows,
    )


def loop_sets_dataset_epoch(b: Built) -> None:
    """The loop calls ``set_epoch(epoch)`` on the dataset (or the ones a Subset or ConcatDataset
    holds) before each epoch, as a loop written for torch's loader does."""
    for s in b.storages[::-1]:
        if hasattr(s, "set_epoch") and not any(s is h for h in b.epoch_hooks):
            b.epoch_hooks.insert(0, s)


def run_all(cfg: Config, *, check_left: bool = True) -> dict[str, Record]:
    """The runs :func:`compare` needs for ``cfg``."""
    p = plan(cfg)
    runs = {
        "torch": run(cfg, "torch", p.torch_adjust, check_left=check_left),
        "clorch": run(cfg, "clorch", check_left=check_left),
    }
    inline = dataclasses.replace(
        cfg,
        num_workers=0,
        persistent_workers=False,
        in_order=True,
        prefetch_factor=None,
        backend="thread",
    )
    if p.after_oracle == "torch_inline" and cfg.behavior == "write":
        inline_adjust = plan(inline).torch_adjust

        def persistent_draws(b: Built) -> None:  # the loader compared draws its base seed once
            if inline_adjust is not None:
                inline_adjust(b)
            b.one_base_seed = cfg.persistent_workers and cfg.workers

        runs["torch_inline"] = run(inline, "torch", persistent_draws, check_left=False)
    if p.inline_oracle:
        runs["clorch_inline"] = run(inline, "clorch", check_left=False)
    if cfg.resume_at is not None:
        if cfg.resume_via == "skip":  # torch through the same framework helper: the oracle;
            # the same loop for both (a restarted job's loader cannot know the epoch otherwise)
            runs["torch_resume"] = run(cfg, "torch", p.torch_adjust, resume=True, check_left=False)
            same_loop = loop_sets_dataset_epoch if "set-epoch-called" in p.rows else None
            runs["clorch_resume"] = run(
                cfg, "clorch", same_loop, resume=True, check_left=check_left
            )
        else:
            runs["clorch_resume"] = run(cfg, "clorch", resume=True, check_left=check_left)
    return runs


# --- comparing ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Divergence:
    cls: str  # the class (what differs, in a few words; groups the long run's findings)
    detail: str  # torch's and clorch_nb's outcomes


def _norm(outs: list[Any], mask: bool, prefer: frozenset[str] = frozenset()) -> list[Any]:
    """Outcomes as compared: a batch's canonical form; an error's non-clorch_nb base type, or,
    for a clorch_nb error of several (``DefaultCollateError`` is a ``TypeError`` and torch's
    ``RuntimeError``), the one in ``prefer`` (the oracle's error types of that epoch)."""
    out = []
    for o in outs:
        if o[0] == "batch":
            out.append(("batch", mask_rng(o[1]) if mask else o[1]))
            continue
        cls = getattr(errors, o[1], None)
        bases = [
            t.__name__
            for t in (cls.__mro__ if isinstance(cls, type) else ())
            if not t.__module__.startswith("clorch_nb")
        ]
        out.append((o[0], next((b for b in bases if b in prefer), o[2])))
    return out


def _show(outs: list[Any]) -> str:
    return "[" + ", ".join("batch" if o[0] == "batch" else f"{o[0]} {o[1]}" for o in outs) + "]"


def compare_epochs(
    a: list[list[Any]],
    b: list[list[Any]],
    mode: str,
    mask: bool,
    who: str = "torch",
) -> list[Divergence]:
    """``b`` (clorch_nb's epochs) against ``a`` (the oracle's)."""
    out: list[Divergence] = []
    if len(a) != len(b):
        return [
            Divergence(
                "epochs: a different number of epochs ran", f"{who} {len(a)}, clorch_nb {len(b)}"
            )
        ]
    for e, (x, y) in enumerate(zip(a, b, strict=True)):
        x = _norm(x, mask)
        y = _norm(y, mask, frozenset(o[1] for o in x if o[0] != "batch"))
        if x[:1] and x[0][0] == "iter-error":
            if not (y[:1] and y[0] == x[0]):
                out.append(
                    Divergence(
                        f"iter(): {who} raises {x[0][1]}, clorch_nb "
                        + (f"{y[0][0]} {y[0][1]}" if y[:1] and y[0][0] != "batch" else "does not"),
                        f"epoch {e}: {who} {_show(x)}; clorch_nb {_show(y)}",
                    )
                )
            continue
        ex = Counter(o[1] for o in x if o[0] != "batch")
        ey = Counter(o[1] for o in y if o[0] != "batch")
        kinds_x = [o[0] for o in x if o[0] != "batch"]
        kinds_y = [o[0] for o in y if o[0] != "batch"]
        detail = f"epoch {e}: {who} {_show(x)}; clorch_nb {_show(y)}"
        if set(ey) - set(ex) or set(kinds_y) - set(kinds_x):
            # named by clorch_nb's own type where it has one (e.g. RuntimeError: StaleIteratorError)
            seen = {f"{o[0]} {o[1]}" for o in x if o[0] != "batch"}
            new = sorted(
                {
                    f"{o[0]} {o[2]}" + (f" ({o[1]})" if o[1] != o[2] else "")
                    for o in b[e]
                    if o[0] != "batch" and f"{o[0]} {o[2]}" not in seen
                }
            )
            out.append(
                Divergence(
                    f"errors: clorch_nb raises {', '.join(new)} where {who} does not", detail
                )
            )
            continue
        if set(ex) - set(ey):
            gone = sorted(set(ex) - set(ey))
            out.append(
                Divergence(f"errors: {who} raises {', '.join(gone)}, clorch_nb does not", detail)
            )
            continue
        if mode == "multiset":
            if Counter(x) != Counter(y):
                cls = (
                    "epoch: number of next() outcomes differs"
                    if len(x) != len(y)
                    else "epoch: multiset of batches differs"
                )
                out.append(Divergence(cls, detail))
            continue
        if len(x) != len(y):
            out.append(Divergence("epoch: number of next() outcomes differs", detail))
        elif [o[0] for o in x] != [o[0] for o in y] or ex != ey:
            out.append(Divergence("epoch: errors at other batches", detail))
        elif x != y:
            if Counter(x) == Counter(y):
                out.append(Divergence("epoch: batch order differs", detail))
            else:
                first = next(i for i, (p, q) in enumerate(zip(x, y, strict=True)) if p != q)
                out.append(
                    Divergence(
                        "epoch: batch values differ",
                        f"{detail}; first at batch {first}: {who} {x[first][1]!r} "
                        f"clorch_nb {y[first][1]!r}"[:1500],
                    )
                )
    return out


def _err(e: Any) -> str:
    return "ok" if e is None else e[1]


def compare(cfg: Config, runs: dict[str, Record]) -> list[Divergence]:
    """Every divergence of clorch_nb's runs from their oracles."""
    p = plan(cfg)
    t, c = runs["torch"], runs["clorch"]
    out: list[Divergence] = []
    if p.refused_when_made:
        return _refused_when_made(t, c)
    if p.keys_refused:
        out += _keys_refused(t, c)
    elif _err(t.init) != _err(c.init):
        out.append(
            Divergence(
                f"init: torch {_err(t.init)}, clorch_nb {_err(c.init)}",
                f"torch {t.init}; clorch_nb {c.init}",
            )
        )
    elif t.init is None:
        for name, a, b in (
            ("len(loader)", t.length, c.length),
            ("len(iter(loader))", t.length_iter, c.length_iter),
        ):
            if a is not None and _lkey(a) != _lkey(b):
                out.append(
                    Divergence(
                        f"{name}: torch {_lkind(a)}, clorch_nb {_lkind(b)}",
                        f"torch {a}; clorch_nb {b}",
                    )
                )
        out += compare_epochs(
            t.epochs,
            c.epochs,
            p.items,
            p.mask,
        )
        if c.endless and not t.endless:
            out.append(Divergence("epoch: clorch_nb never ends (200 next() calls)", ""))
    if "clorch_inline" in runs:
        ci = runs["clorch_inline"]
        # persistent workers draw the seed once (README "`worker_init_fn` and seeds"), the
        # inline run at each iter(): their first epochs are seeded alike
        k = 1 if cfg.persistent_workers else len(ci.epochs)
        for d in compare_epochs(
            ci.epochs[:k], c.epochs[:k], p.items, False, who="clorch_nb inline"
        ):
            out.append(Divergence(f"rng vs own inline run: {d.cls}", d.detail))
    if not p.keys_refused:
        oracle = runs.get("torch_inline", t) if p.after_oracle == "torch_inline" else t
        out += _after(oracle, c)
    out += _left(t, c)
    if "clorch_resume" in runs:
        out += _resume(cfg, p, runs.get("torch_resume", c), runs["clorch_resume"])
    return out


def _lkey(o: Any) -> Any:
    return o if o is None or o[0] == "ok" else ("error", o[2])


def _lkind(o: Any) -> str:
    return "None" if o is None else ("a number" if o[0] == "ok" else f"raises {o[2]}")


def _lshow(o: Any) -> str:
    return "None" if o is None else (str(o[1]) if o[0] == "ok" else o[2])


def _refused_when_made(t: Record, c: Record) -> list[Divergence]:
    """clorch_nb refuses at construction naming ``prefetch_factor``; torch fails (anywhere)."""
    if c.init is not None and "prefetch_factor" in str(c.init):
        return []  # (torch fails at iter(): tests/contract/test_scenarios5.py's B95 asserts it)
    if t.init is not None and c.init == t.init:
        return []  # refused before either loader: the sampler (a RandomSampler of no items)
    return [
        Divergence("prefetch_factor < 1: not refused as made", f"torch {t.init}; ours {c.init}")
    ]


def _keys_refused(t: Record, c: Record) -> list[Divergence]:
    if t.init is not None:  # torch refuses the configuration for another reason: compare that
        return (
            [] if c.init is not None else [Divergence(f"init: torch {t.init[1]}, clorch_nb ok", "")]
        )
    if not any(o[0] in ("batch", "error") for o in (t.epochs or [[]])[0]):
        return []  # no batch reads a key (drop_last of a short epoch; torch's iter() refused)
    errs = [c.init] if c.init else []
    for ep in c.epochs[:1]:
        errs += [o[1:] for o in ep[:1] if o[0] != "batch"]
    if any("k0" in e[2] for e in errs if e):
        return []
    what = "accepted" if not errs else f"refused without naming it ({errs[0][0]})"
    first = _show(_norm(c.epochs[0], False)) if c.epochs else None
    return [
        Divergence(
            f"keys: a non-integer sampler key is {what}",
            f"clorch_nb init {c.init}; first epoch {first}",
        )
    ]


def _after(t: Record, c: Record) -> list[Divergence]:
    """The user's objects. Read counts are not compared when an epoch was abandoned (list()
    stopped at an error): how far workers read ahead of an abandoned epoch is not defined."""
    out = []
    abandoned = any(o[0] == "list-error" for r in (t, c) for ep in r.epochs for o in ep)
    skip = ("counts", "tcounts") if abandoned else ()
    for i, (a, b) in enumerate(zip(t.after, c.after, strict=False)):
        for key in a:
            if key in skip:
                continue
            if a[key] != b.get(key):
                va, vb = a[key], b.get(key)
                if isinstance(va, tuple):
                    va, vb = "values", "other values"
                out.append(
                    Divergence(
                        f"user objects after: {key}", f"storage {i}: torch {va}, clorch_nb {vb}"
                    )
                )
    return out


def _left(t: Record, c: Record) -> list[Divergence]:
    out = []
    if not c.left:
        return out
    if c.left["procs"] > t.left.get("procs", 0):
        out.append(Divergence("left behind: child processes", f"{c.left} (torch {t.left})"))
    if c.left["shm"]:
        out.append(Divergence("left behind: /dev/shm/clorch_nb-* entries", f"{c.left['shm']}"))
    if c.left["fds"] > t.left.get("fds", 0):
        out.append(Divergence("left behind: open fds", f"{c.left} (torch {t.left})"))
    if len(c.left["threads"]) > len(t.left.get("threads", [])):
        out.append(Divergence("left behind: threads", f"{c.left['threads']}"))
    return out


def _resume(cfg: Config, p: Plan, c: Record, r: Record) -> list[Divergence]:
    """The resumed run ``r`` against ``c``: clorch_nb's uninterrupted run (``load_state_dict``),
    or torch's run through the same framework helper (``resume_via="skip"``)."""
    if c.init is not None:
        return []
    if r.state_error is not None:
        if p.state_may_refuse:
            return []
        return [
            Divergence(
                f"resume: state_dict()/load_state_dict() raises {r.state_error[1]}",
                f"{r.state_error}",
            )
        ]
    # in_order=False: whichever batch is built first, before and after the resume alike
    mode = "multiset" if cfg.workers and not cfg.in_order else "ordered"
    if cfg.resume_via == "skip":  # ``c`` is torch's run through skip_first_batches
        return [
            Divergence(f"resume by skip_first_batches: {d.cls}", d.detail)
            for d in compare_epochs(c.epochs, r.epochs, p.items, p.mask, who="torch")
        ]
    mask = cfg.behavior == "rng" and "rng-threads" in p.rows
    return [
        Divergence(f"resume: {d.cls}", d.detail)
        for d in compare_epochs(c.epochs, r.epochs, mode, mask, who="uninterrupted")
    ]


def check(cfg: Config, *, check_left: bool = True) -> list[Divergence]:
    """Run ``cfg`` under both and compare."""
    return compare(cfg, run_all(cfg, check_left=check_left))


__all__ = ["DOCUMENTED", "Divergence", "check", "compare", "fx", "plan", "run_all"]


def shrink(
    cfg: Config,
    cls: str,
    budget: int = 40,
    checker: Callable[[Config], list[Divergence]] | None = None,
) -> tuple[Config, str]:
    """A simpler configuration that still shows divergence class ``cls`` (greedy, one field at a
    time, at most ``budget`` runs), and its detail."""
    from tests.harness.configs import simpler

    checker = checker or check
    best, detail = cfg, ""
    improved = True
    while improved and budget > 0:
        improved = False
        for cand in simpler(best):
            if budget <= 0:
                break
            budget -= 1
            try:
                found = [d for d in checker(cand) if d.cls == cls]
            except Exception:  # noqa: BLE001 - a harness failure on a candidate: not simpler
                continue
            if found:
                best, detail, improved = cand, found[0].detail, True
                break
    return best, detail
