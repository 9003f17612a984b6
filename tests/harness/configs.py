"""Loader configurations: :class:`Config` (plain data, printable as a reproducing call) and
:func:`configs`, the hypothesis strategy over them.

Process workers are slow to start, so they are a small share (``process_weight``); inline and
thread configurations are most of the space.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

DATASETS = ("map", "iter", "iter_sized", "tensor_dataset", "subset", "concat")
STREAMS = ("iter", "iter_sized")
ITEMS = ("tensor", "numpy", "dict", "tuple", "dataclass", "str", "int", "ragged")
BEHAVIORS = ("plain", "write", "rng", "raise")
# sampler kinds: default (shuffle None/False), shuffle (shuffle=True with a generator),
# random (RandomSampler with a generator), distributed (torch's DistributedSampler), list (a
# custom list of indices), keys (a list of "k<i>" keys), batch (BatchSampler over sequential),
# batch_random (BatchSampler over a RandomSampler), batch_list (a custom list of index lists)
SAMPLERS = (
    "default",
    "shuffle",
    "random",
    "distributed",
    "list",
    "keys",
    "batch",
    "batch_random",
    "batch_list",
)
BATCH_SAMPLERS = ("batch", "batch_random", "batch_list")


@dataclasses.dataclass(frozen=True)
class Config:
    """One loader configuration, run under torch and under clorch_nb."""

    dataset: str = "map"
    n: int = 4
    item: str = "tensor"
    behavior: str = "plain"
    raise_at: tuple[int, ...] = ()
    num_workers: int = 0
    backend: str = "thread"  # clorch_nb's worker_backend when num_workers > 0
    persistent_workers: bool = False
    in_order: bool = True
    prefetch_factor: int | None = None
    sampler: str = "default"
    batch_size: int | None = 1
    drop_last: bool = False
    pad: bool = False  # collate_fn=fixtures.pad_collate (ragged items)
    set_epoch: bool = False
    epochs: int = 1
    consume: str = "next"  # "next": next() until StopIteration; "list": list(iter(loader))
    resume_at: tuple[int, int] | None = None  # (epoch, batches taken) -> state_dict, new loader
    # how the restarted job resumes: "state" (load_state_dict) or "skip" (accelerate's
    # skip_first_batches over a fresh loader, for the rest of that epoch; torch does the same)
    resume_via: str = "state"
    seed: int = 0
    replicas: tuple[int, int] = (2, 0)  # DistributedSampler (num_replicas, rank)
    dist_shuffle: bool = False

    @property
    def stream(self) -> bool:
        return self.dataset in STREAMS

    @property
    def workers(self) -> bool:
        return self.num_workers > 0

    def short(self) -> str:
        """The fields that differ from the defaults, as ``Config(...)`` code."""
        default = Config()
        diff = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        ]
        return f"Config({', '.join(diff)})"

    def complexity(self) -> tuple[Any, ...]:
        """Smaller is simpler (which of two reproducing configurations to report)."""
        return (
            self.num_workers > 0 and self.backend == "process",
            self.num_workers,
            self.epochs,
            self.n,
            sum(
                getattr(self, f.name) != getattr(Config(), f.name) for f in dataclasses.fields(self)
            ),
        )


@st.composite
def configs(draw: Any, process_weight: float = 0.06) -> Config:
    """A loader configuration. ``process_weight``: the share with process workers."""
    dataset = draw(st.sampled_from(DATASETS))
    stream = dataset in STREAMS
    n = draw(st.integers(0, 13))
    item = "tensor" if dataset == "tensor_dataset" else draw(st.sampled_from(ITEMS))
    behaviors = ("plain",) if dataset == "tensor_dataset" else BEHAVIORS
    behavior = draw(st.sampled_from(behaviors))
    raise_at: tuple[int, ...] = ()
    if behavior == "raise" and n:
        raise_at = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3))))
    num_workers = draw(st.integers(0, 3))
    backend = "thread"
    if num_workers and draw(st.integers(0, 999)) >= 1000 - round(1000 * process_weight):
        backend = "process"  # drawn last in the range: shrinking goes towards threads
    persistent = draw(st.booleans()) if num_workers else False
    in_order = draw(st.booleans()) if num_workers else True
    if num_workers:
        prefetch = draw(st.sampled_from([None, None, 1, 2, 3, 0]))
    else:
        prefetch = draw(st.sampled_from([None] * 12 + [2]))  # not None: torch's ValueError
    if stream:
        sampler = draw(st.sampled_from(["default"] * 12 + ["shuffle", "random"]))
    else:
        sampler = draw(st.sampled_from(SAMPLERS))
    if sampler in BATCH_SAMPLERS:
        batch_size: int | None = 1  # torch's default, required beside batch_sampler
        drop_last = draw(st.booleans())  # the BatchSampler's own
    else:
        batch_size = draw(st.sampled_from([None, 1, 2, 3, 4]))
        drop_last = draw(st.booleans()) if batch_size else False
    pad = item == "ragged" and batch_size is not None and draw(st.integers(0, 4)) > 0
    epochs = draw(st.integers(1, 2))
    set_epoch = draw(st.booleans())
    # list() stops at a batch's error: only without errors (torch then takes 5 s to join workers)
    consume = "list" if behavior != "raise" and draw(st.integers(0, 7)) == 0 else "next"
    resume_at = None
    resume_via = "state"
    if consume == "next" and draw(st.integers(0, 3)) == 0:
        resume_at = (draw(st.integers(0, epochs - 1)), draw(st.integers(0, 4)))
        # accelerate's helper needs a batch_sampler; and thread workers that write into the
        # dataset leave it written for the "restarted" job (one process here; documented:
        # threads-share-dataset), where torch's fork workers' writes stay theirs
        written = behavior == "write" and backend == "thread" and num_workers > 0
        # and skipping the first k batch positions is skipping what was delivered only in order
        # (non-integer keys: refused by clorch_nb, documented; torch is no oracle there)
        keys = sampler == "keys"
        if batch_size is not None and not written and not keys and (in_order or not num_workers):
            resume_via = draw(st.sampled_from(["state", "skip"]))
    replicas = (2, 0)
    dist_shuffle = False
    if sampler == "distributed":
        r = draw(st.integers(1, 3))
        replicas = (r, draw(st.integers(0, r - 1)))
        dist_shuffle = draw(st.booleans())
    seed = draw(st.integers(0, 3))
    return Config(
        dataset=dataset,
        n=n,
        item=item,
        behavior=behavior,
        raise_at=raise_at,
        num_workers=num_workers,
        backend=backend,
        persistent_workers=persistent,
        in_order=in_order,
        prefetch_factor=prefetch,
        sampler=sampler,
        batch_size=batch_size,
        drop_last=drop_last,
        pad=pad,
        set_epoch=set_epoch,
        epochs=epochs,
        consume=consume,
        resume_at=resume_at,
        resume_via=resume_via,
        seed=seed,
        replicas=replicas,
        dist_shuffle=dist_shuffle,
    )


def simpler(cfg: Config) -> list[Config]:
    """Candidate one-step simplifications of ``cfg`` (for shrinking a divergence's example)."""
    out: list[Config] = []

    def add(**changes: Any) -> None:
        c = dataclasses.replace(cfg, **changes)
        if c != cfg and valid(c):
            out.append(c)

    if cfg.backend == "process" and cfg.num_workers:
        add(backend="thread")
    for k in range(cfg.num_workers):
        add(
            num_workers=k,
            **(
                {}
                if k
                else {
                    "persistent_workers": False,
                    "in_order": True,
                    "prefetch_factor": None,
                    "backend": "thread",
                }
            ),
        )
    add(epochs=1, resume_at=None if cfg.resume_at and cfg.resume_at[0] else cfg.resume_at)
    add(resume_at=None)
    add(resume_via="state")
    if cfg.resume_at:
        add(resume_at=(cfg.resume_at[0], max(0, cfg.resume_at[1] - 1)))
    add(consume="next")
    add(set_epoch=False)
    add(persistent_workers=False)
    add(in_order=True)
    add(prefetch_factor=None)
    add(seed=0)
    for n in range(cfg.n):
        add(n=n, raise_at=tuple(i for i in cfg.raise_at if i < n))
    if len(cfg.raise_at) > 1:
        for i in cfg.raise_at:
            add(raise_at=(i,))
    add(behavior="plain", raise_at=())
    add(item="tensor", pad=False)
    add(pad=False)
    add(sampler="default", replicas=(2, 0), dist_shuffle=False)
    add(dist_shuffle=False)
    add(drop_last=False)
    add(batch_size=1)
    if cfg.dataset in ("subset", "concat", "iter_sized"):
        add(dataset="map" if cfg.dataset != "iter_sized" else "iter")
    return out


def valid(cfg: Config) -> bool:
    """What :func:`configs` can produce (shrinking keeps to it)."""
    if cfg.dataset == "tensor_dataset" and (cfg.item != "tensor" or cfg.behavior != "plain"):
        return False
    if cfg.raise_at and (cfg.behavior != "raise" or max(cfg.raise_at) >= cfg.n):
        return False
    if cfg.behavior == "raise" and not cfg.raise_at:
        return False
    if cfg.pad and (cfg.item != "ragged" or cfg.batch_size is None):
        return False
    if cfg.sampler in BATCH_SAMPLERS and cfg.batch_size != 1:
        return False
    if cfg.batch_size is None and cfg.drop_last:
        return False
    if cfg.stream and cfg.sampler not in ("default", "shuffle", "random"):
        return False
    if cfg.consume == "list" and cfg.behavior == "raise":
        return False
    if cfg.resume_at and (cfg.consume != "next" or cfg.resume_at[0] >= cfg.epochs):
        return False
    if cfg.resume_via == "skip" and (
        cfg.resume_at is None
        or cfg.batch_size is None  # accelerate's skip_first_batches needs a batch_sampler
        or (cfg.behavior == "write" and cfg.backend == "thread" and cfg.num_workers > 0)
        or (cfg.num_workers > 0 and not cfg.in_order)  # k positions skipped, not k delivered
        or cfg.sampler == "keys"  # refused by clorch_nb (documented): no torch oracle
    ):
        return False
    return bool(cfg.num_workers or not (cfg.persistent_workers or not cfg.in_order))
