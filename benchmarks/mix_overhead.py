"""What mixing costs (issue 33: the mixing arithmetic must be negligible, <= 2 us per item).

1. **Tensor path**: ``for batch in loader`` (inline, batch 256) over one
   ``tensor_dataset(60000 x 784)`` against ``data.mix`` of two tensor sources of the same rows
   (45,000 : 15,000 at 3 : 1, so the same 60,000 items an epoch, ``shuffle=False``: the mix is
   shuffled by itself); the mix builds each batch with its sources' ``get_batch`` and scatters
   the two parts back in place. The baseline is the plain loader with ``shuffle=True`` (rows read
   in random order, as the mix reads them; reading rows in order is faster still, also shown).
2. **Item path**: the same with ``data.dataset(get_item=...)`` sources (a small tensor per item),
   built item by item: the mix's per-item lookup (source, pass, permutation) plus the call.
3. **Per-batch RNG seeding**: the loader seeds the global RNGs before every batch for a dataset
   that may draw random numbers; a mix of tensor datasets declares it does not
   (``MixedDataset.draws_random``), as a plain ``tensor_dataset`` does. The row forces it on to
   show what that saves.
4. **Fixed costs**: the interleave (made once per copy: an argsort of ``epoch_size`` fixed-point
   points) and one pass's permutation, at 1M items.
5. **Share error** after one epoch and per batch of 32 (from ``widgets.mix_report``), against
   random per-item mixing (each item picks its source with probability ``w``: what torchdata's
   ``MultiNodeWeightedSampler``, HF's ``interleave_datasets(probabilities=...)`` and litdata's
   ``CombinedStreamingDataset(weights=...)`` do; none of those is installed here, so their rule is
   simulated with ``torch.multinomial``, same seeds for every repeat).

Run: ``.venv/bin/python benchmarks/mix_overhead.py [--reps 7]``. Times are CPU time of this
process (``time.process_time``, torch on one thread), repetitions interleaved; medians and
minimums (the minimum is the steadier figure on a shared machine).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from clorch_nb import data, widgets

ROWS, WIDTH, BATCH = 60_000, 784, 256


def _per_item(loader: Any) -> float:
    t0 = time.process_time()
    n = 0
    for b in loader:
        n += b["target"].shape[0]
    return (time.process_time() - t0) / n


def _interleaved(
    reps: int, runs: dict[str, Callable[[], float]]
) -> tuple[dict[str, float], dict[str, float]]:
    """Medians and minimums of ``reps`` interleaved runs of each."""
    got: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(reps):
        for k, fn in runs.items():
            got[k].append(fn())
    return {k: statistics.median(v) for k, v in got.items()}, {k: min(v) for k, v in got.items()}


def tensor_path(reps: int) -> tuple[dict[str, float], dict[str, float]]:
    X, y = torch.randn(ROWS, WIDTH), torch.arange(ROWS)  # noqa: N806
    plain = data.tensor_dataset(X, y)
    web = data.tensor_dataset(X[:45_000], y[:45_000])
    code = data.tensor_dataset(X[45_000:], y[45_000:])
    mixed = data.mix({"web": web, "code": code}, {"web": 3, "code": 1}, seed=0)
    seeded = data.mix({"web": web, "code": code}, {"web": 3, "code": 1}, seed=0)
    seeded.draws_random = True  # as a dataset that may draw: the loader seeds every batch
    loaders = {
        "plain tensor_dataset": data.dataloader(plain, batch_size=BATCH, shuffle=False),
        "plain tensor_dataset, shuffled": data.dataloader(
            plain, batch_size=BATCH, shuffle=True, seed=0
        ),
        "mix of 2 tensor sources": data.dataloader(mixed, batch_size=BATCH, shuffle=False),
        "mix, per-batch RNG seeding forced": data.dataloader(
            seeded, batch_size=BATCH, shuffle=False
        ),
    }
    for dl in loaders.values():  # first epoch: interleave, permutations, allocator warm-up
        _per_item(dl)
    batches = list(torch.arange(ROWS).split(BATCH))

    def arithmetic() -> float:  # source, pass and permutation lookup of every item, alone
        t0 = time.process_time()
        for idx in batches:
            mixed.locate(idx)
        return (time.process_time() - t0) / ROWS

    runs = {k: (lambda dl=dl: _per_item(dl)) for k, dl in loaders.items()}
    return _interleaved(reps, {**runs, "the mixing arithmetic alone (locate)": arithmetic})


def item_path(reps: int) -> tuple[dict[str, float], dict[str, float]]:
    rows = torch.randn(ROWS, 16)

    def src(lo: int, hi: int) -> Any:
        return data.dataset(
            size=hi - lo, get_item=lambda i: {"data": rows[lo + i], "target": torch.tensor(lo + i)}
        )

    plain = src(0, ROWS)
    mixed = data.mix({"web": src(0, 45_000), "code": src(45_000, ROWS)}, {"web": 3, "code": 1})
    loaders = {
        "plain get_item dataset": data.dataloader(plain, batch_size=BATCH, shuffle=False),
        "plain get_item dataset, shuffled": data.dataloader(
            plain, batch_size=BATCH, shuffle=True, seed=0
        ),
        "mix of 2 get_item sources": data.dataloader(mixed, batch_size=BATCH, shuffle=False),
    }
    for dl in loaders.values():
        _per_item(dl)
    return _interleaved(reps, {k: (lambda dl=dl: _per_item(dl)) for k, dl in loaders.items()})


def fixed_costs(reps: int) -> dict[str, float]:
    def first_lookup(sizes: list[int], epoch_size: int) -> float:
        srcs = {f"s{j}": data.dataset(size=n, get_item=int) for j, n in enumerate(sizes)}
        m = data.mix(srcs, {n: 1 for n in srcs}, epoch_size=epoch_size)
        t0 = time.process_time()
        m.source_of(0)  # the first lookup makes the interleave and one source's permutation
        return time.process_time() - t0

    return _interleaved(
        reps,
        {  # tiny sources: the interleave alone; a tiny epoch: the permutation alone
            "interleave of 1M positions, 3 sources (s)": lambda: first_lookup([10] * 3, 10**6),
            "one pass's permutation of a 1M-item source (s)": lambda: first_lookup([10**6], 10),
        },
    )[0]


def share_error(reps: int) -> dict[str, float]:
    sizes, weights = {"web": 6000, "code": 3000, "math": 1000}, [6.0, 3.0, 1.0]
    srcs = {n: data.tensor_dataset(torch.zeros(k, 1), torch.arange(k)) for n, k in sizes.items()}
    share = np.asarray(weights) / sum(weights)
    ours_epoch, ours_batch, rnd_epoch, rnd_batch = [], [], [], []
    for seed in range(reps):
        m = data.mix(srcs, dict(zip(sizes, weights, strict=True)), seed=seed)
        r = widgets.mix_report(m, batch_size=32)
        ours_epoch.append(float(np.abs(r.delivered(0)[0] - np.asarray(r.planned)).max()))
        ours_batch.append(r.batch_error())
        g = torch.Generator().manual_seed(seed)
        pick = torch.multinomial(torch.tensor(share), len(m), replacement=True, generator=g)
        counts = np.bincount(pick.numpy(), minlength=3)
        rnd_epoch.append(float(np.abs(counts - np.asarray(r.planned)).max()))
        per_batch = np.stack(
            [np.bincount(c.numpy(), minlength=3) for c in pick[: len(m) // 32 * 32].split(32)]
        )
        rnd_batch.append(float(np.abs(per_batch - 32 * share).max()))
    return {
        "ours: epoch count off the plan (items)": max(ours_epoch),
        "ours: worst batch of 32 (items)": max(ours_batch),
        "random per item: epoch count off the plan (items, median)": statistics.median(rnd_epoch),
        "random per item: worst batch of 32 (items, median)": statistics.median(rnd_batch),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=7)
    reps = p.parse_args().reps
    torch.set_num_threads(1)
    (t_med, t_min), (i_med, i_min) = tensor_path(reps), item_path(reps)
    print(f"## per item (CPU us; batch {BATCH}, inline; median of {reps}, min in brackets)")
    print("| loader | us/item | over the plain dataset | ratio |")
    for med, low, base in (  # the shuffled plain loader reads rows in random order, as the mix
        (t_med, t_min, "plain tensor_dataset, shuffled"),
        (i_med, i_min, "plain get_item dataset, shuffled"),
    ):
        for k in med:
            if k.startswith("the mixing arithmetic"):  # a part of the mix's time, not a loader
                print(f"| {k} | {med[k] * 1e6:.3f} ({low[k] * 1e6:.3f}) | | |")
                continue
            over, over_min = med[k] - med[base], low[k] - low[base]
            print(
                f"| {k} | {med[k] * 1e6:.3f} ({low[k] * 1e6:.3f}) | +{over * 1e6:.3f} "
                f"(+{over_min * 1e6:.3f}) | {med[k] / med[base]:.2f}x |"
            )
    print(f"## fixed costs (CPU s, median of {reps})")
    for k, v in fixed_costs(reps).items():
        print(f"| {k} | {v:.3f} |")
    print(f"## share error, 10,000 items 6:3:1 ({reps} seeds)")
    for k, v in share_error(reps).items():
        print(f"| {k} | {v:.1f} |")


if __name__ == "__main__":
    main()
