"""One soak episode: its options and faults drawn from a seed, and a consumer that drives it."""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from clorch_nb import data
from tests.soak.faults import ITEM_FAULTS, faulty_dataset

__all__ = ["CONSUMERS", "Episode", "Outcome", "draw", "expected_order", "make_loader"]

#: what the consumer does: "full" (every batch), "hold" (every batch, all kept alive), "break"
#: (stop after k batches, then a full epoch), "reiterate" (after k batches a new iter(), consumed
#: in full), "close_mid" (close() after k batches from the loop, then a full epoch),
#: "close_thread" (another thread calls close() after delay_s), "close_callback" (a subscriber
#: calls close() when batch k is handed over, then a full epoch), "sigint" (a real SIGINT to the
#: main thread after delay_s, then a full epoch), "drop" (after k batches, loader dropped
#: without close() while its last error, if any, is kept), "rerun" (a notebook cell re-run 3
#: times: 3 twin loaders, all kept alive as IPython's Out keeps them, each consumed in full)
CONSUMERS = (
    "full",
    "hold",
    "break",
    "reiterate",
    "close_mid",
    "close_thread",
    "close_callback",
    "sigint",
    "drop",
    "rerun",
)
ORDERS = ("seq", "shuffle", "dist", "list", "endless")
#: item faults that raise an Exception (max_failures skips them; a BaseException is not skipped)
SKIPPABLE = ("raise", "str", "lock", "init")


class EndlessSampler:
    """A sampler without an end (mmengine's ``InfiniteSampler``): seeded permutations of ``n``
    forever; ``len()`` is one pass. An epoch must refuse it at its last batch (B37)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed = n, seed

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        rng = random.Random(self.seed)
        while True:
            order = list(range(self.n))
            rng.shuffle(order)
            yield from order


@dataclass(frozen=True)
class Episode:
    """The options and faults of one episode (everything derives from ``seed`` and ``index``).

    Attributes:
        seed (int): the run's seed.
        index (int): the episode number in the run.
        backend ("inline" | "thread" | "process"): worker backend.
        num_workers (int): 0 for inline.
        batch_size (int): items per batch.
        n (int): dataset size.
        width (int): floats per item (20,000: batches go through /dev/shm).
        prefetch_factor (int): batches in flight per worker.
        timeout_ms (float | None): the loader's ``timeout_ms``.
        order ("seq" | "shuffle" | "dist" | "list"): sequential, shuffled, a
            ``distributed_sampler`` or a plain list of indices as the sampler.
        drop_last (bool): the loader's ``drop_last``.
        sampler_args (tuple): ``(num_replicas, rank, shuffle, drop_last)`` for "dist"; the index
            list for "list".
        fault (str): the item fault (``faults.ITEM_FAULTS``).
        at (int): the faulty dataset index.
        seconds (float): sleep of the "slow" and "hang" faults.
        consumer (str): one of :data:`CONSUMERS`.
        k (int): batches taken before the consumer acts.
        delay_s (float): delay of the "close_thread" and "sigint" consumers.
        max_failures (int | None): the loader's ``max_failures`` (drawn for faults that raise
            an ``Exception``, in a known order): the faulty item is skipped by the fill rule,
            and a batch of only that item is dropped (B62), with no error.
    """

    seed: int
    index: int
    backend: str
    num_workers: int
    batch_size: int
    n: int
    width: int
    prefetch_factor: int
    timeout_ms: float | None
    order: str
    drop_last: bool
    sampler_args: tuple[Any, ...]
    fault: str
    at: int
    seconds: float
    consumer: str
    k: int
    delay_s: float
    max_failures: int | None = None

    def repro(self) -> str:
        """The one-line command that reruns this episode (a SIGINT's exact instant varies)."""
        return (
            f"python -m tests.soak --seed {self.seed} --episode {self.index}  # "
            f"{self.backend} workers={self.num_workers} bs={self.batch_size} n={self.n} "
            f"width={self.width} order={self.order} drop_last={self.drop_last} "
            f"fault={self.fault}@{self.at} consumer={self.consumer} k={self.k} "
            f"delay={self.delay_s:.3f}s timeout_ms={self.timeout_ms}"
            f"{'' if self.max_failures is None else f' max_failures={self.max_failures}'}"
        )


def draw(
    seed: int, index: int, backends: tuple[str, ...] = ("inline", "thread", "process")
) -> Episode:
    """Episode ``index`` of the run seeded ``seed`` (the same episode on every machine).

    Example:
        >>> draw(1, 7) == draw(1, 7)
        True
    """
    rng = random.Random(f"{seed}:{index}")
    backend = rng.choice(backends)
    n = rng.choice([0, 1] + [rng.randint(2, 40)] * 8)
    order = rng.choice(ORDERS) if n else "seq"
    sampler_args: tuple[Any, ...] = ()
    if order == "dist":
        replicas = rng.randint(1, 3)
        sampler_args = (replicas, rng.randrange(replicas), rng.random() < 0.5, rng.random() < 0.3)
    elif order == "list":
        sampler_args = tuple(rng.randrange(n) for _ in range(rng.randint(0, 2 * n)))
    fault = "none"
    if rng.random() < 0.55:
        fault = rng.choice([f for f, where in ITEM_FAULTS.items() if backend in where])
    seconds = {"slow": rng.uniform(0.001, 0.01), "hang": 2.0}.get(fault, 0.0)
    ep = Episode(
        seed=seed,
        index=index,
        backend=backend,
        num_workers=0 if backend == "inline" else rng.randint(1, 3),
        batch_size=rng.randint(1, 6),
        n=n,
        width=rng.choice([2, 2, 20_000]),
        prefetch_factor=rng.randint(1, 3),
        timeout_ms=1000.0 if fault == "hang" else rng.choice([None, None, 60_000.0]),
        order=order,
        drop_last=rng.random() < 0.3,
        sampler_args=sampler_args,
        fault=fault,
        at=rng.randrange(n) if n else 0,
        seconds=seconds,
        consumer=rng.choice(CONSUMERS),
        k=rng.randint(0, 4),
        delay_s=rng.uniform(0.0, 0.25),
    )
    # drawn last, so every episode before this option existed keeps its other draws
    if ep.fault in SKIPPABLE and ep.order in ("seq", "dist", "list") and rng.random() < 0.5:
        ep = replace(ep, max_failures=4 * ep.n + 8)  # never spent: every fault is skipped
    return ep


def _sampler(ep: Episode) -> Any:
    if ep.order == "dist":
        replicas, rank, shuffle, drop_last = ep.sampler_args
        s = data.distributed_sampler(
            ep.n,
            num_replicas=replicas,
            rank=rank,
            seed=ep.seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        s.set_epoch(ep.index)
        return s
    if ep.order == "list":
        return list(ep.sampler_args)
    if ep.order == "endless":
        return EndlessSampler(ep.n, ep.seed * 1000 + ep.index)
    return None


def make_loader(ep: Episode) -> data.DataLoader:
    """The episode's loader over its faulty dataset."""
    ds = faulty_dataset(ep.n, ep.width, ep.fault, ep.at, ep.seconds)
    opts: dict[str, Any] = {}
    if ep.backend != "inline":
        opts = {
            "worker_backend": ep.backend,
            "prefetch_factor": ep.prefetch_factor,
            "timeout_ms": ep.timeout_ms,
        }
    sampler = _sampler(ep)
    return data.dataloader(
        ds,
        batch_size=ep.batch_size,
        num_workers=ep.num_workers,
        shuffle=ep.order == "shuffle",
        drop_last=ep.drop_last,
        sampler=sampler,
        seed=ep.seed * 1000 + ep.index,
        max_failures=ep.max_failures,
        **opts,
    )


def expected_order(ep: Episode) -> list[int] | None:
    """The indices one epoch delivers, in order; None when shuffled (then only their count and
    distinctness are known)."""
    if ep.order == "shuffle":
        return None
    sampler = _sampler(ep)
    if ep.order == "endless":  # one pass: what len() says
        order = [int(i) for i in itertools.islice(iter(sampler), ep.n)]
    else:
        order = list(range(ep.n)) if sampler is None else [int(i) for i in sampler]
    if ep.drop_last:
        order = order[: len(order) // ep.batch_size * ep.batch_size]
    if ep.max_failures is not None:
        order = skip_rule(order, ep.at, ep.batch_size)
    return order


def skip_rule(order: list[int], bad: int, batch_size: int) -> list[int]:
    """``order`` as ``max_failures`` delivers it when item ``bad`` always fails: in each batch
    its places hold the next good item of the batch (wrapping); a batch of only ``bad`` is
    dropped.

    Example:
        >>> skip_rule([0, 3, 3, 3, 4, 3], bad=3, batch_size=2)
        [0, 0, 4, 4]
    """
    out: list[int] = []
    for b in range(0, len(order), batch_size):
        batch = order[b : b + batch_size]
        if all(i == bad for i in batch):
            continue  # nothing to fill it with: dropped (B62)
        n = len(batch)
        for p in range(n):
            q = p
            while batch[q] == bad:
                q = (q + 1) % n
            out.append(batch[q])
    return out


def epoch_size(ep: Episode) -> int:
    """How many indices one epoch delivers."""
    if ep.max_failures is not None:
        return len(expected_order(ep) or [])
    total = ep.n if ep.order in ("seq", "shuffle") else len(expected_order(ep) or [])
    if ep.order in ("seq", "shuffle") and ep.drop_last:
        total = total // ep.batch_size * ep.batch_size
    return total


@dataclass
class Outcome:
    """What the consumer saw.

    Attributes:
        epochs (list[list[int]]): the indices each epoch delivered, in order.
        errors (list[BaseException | None]): how each epoch ended (None: in full, or by a
            deliberate stop of the consumer).
        complete (list[bool]): whether each epoch was meant to be consumed in full.
        notes (list[str]): problems the consumer itself noticed (become violations).
        kept (list[Any]): what must stay alive until the leak checks (a dropped loader's error).
        env_fault (bool): the episode's fault is "env": each epoch sets the variable first.
    """

    epochs: list[list[int]] = field(default_factory=list)
    errors: list[BaseException | None] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kept: list[Any] = field(default_factory=list)
    env_fault: bool = False


def targets(batch: Any) -> list[int]:
    """The dataset indices in a batch."""
    return [int(t) for t in batch["target"]]


def close_later(dl: data.DataLoader, delay_s: float, notes: list[str]) -> threading.Thread:
    """A started thread that calls ``dl.close()`` after ``delay_s`` (a watchdog)."""

    def run() -> None:
        stop = threading.Event()
        stop.wait(delay_s)
        try:
            dl.close()
        except BaseException as exc:  # noqa: BLE001 - reported as a violation
            notes.append(f"close() from another thread raised {type(exc).__name__}: {exc}")

    t = threading.Thread(target=run, name="soak-closer", daemon=True)
    t.start()
    return t
