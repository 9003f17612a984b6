"""A dataset factory and the checker for ``notebooks/17_your_dataset_in_processes.ipynb``.

:func:`docs_chunks` lives here, in an importable module, because a ``process_spec`` names its
factory by import path: each process worker imports it and builds the dataset itself (a
function defined in a notebook cell cannot be imported by another process).
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

from clorch_nb.data import DataLoader
from clorch_nb.tutorial._check import Check, checker, require

__all__ = ["DocsChunks", "docs_chunks", "exercise_1"]


class DocsChunks(Dataset[str]):
    """Fixed-size records of a text file: item ``i`` is characters ``[i * size, (i + 1) * size)``
    of the file (its bytes decoded as UTF-8), read with ``seek`` + ``read`` from a handle opened
    on first use in the process that reads.

    Args:
        path (str): the file.
        size (int): bytes per record; a last partial record is left out.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.txt"
        >>> _ = p.write_text("abcdefgh")
        >>> ds = DocsChunks(str(p), size=3)
        >>> len(ds), ds[1]
        (2, 'def')
    """

    def __init__(self, path: str, size: int = 64) -> None:
        self.path, self.size = path, size
        self.fh: Any = None  # opened lazily, in whichever process reads
        self.n = os.path.getsize(path) // size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> str:
        if self.fh is None:
            self.fh = open(self.path, "rb")  # noqa: SIM115 - kept open for the next items
        self.fh.seek(i * self.size)
        return str(self.fh.read(self.size).decode("utf-8", "replace"))


def docs_chunks(path: str, size: int = 64) -> DocsChunks:
    """A :class:`DocsChunks` with a ``process_spec`` naming this factory: process workers build
    their own copy from ``(path, size)``; nothing of the dataset itself is pickled.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.txt"
        >>> _ = p.write_text("abcdefgh")
        >>> docs_chunks(str(p), 4).process_spec["factory"]
        'clorch_nb.tutorial.nb17:docs_chunks'
    """
    ds = DocsChunks(path, size)
    ds.process_spec = {  # type: ignore[attr-defined]
        "factory": "clorch_nb.tutorial.nb17:docs_chunks",
        "args": [path, size],
    }
    return ds


class _WhoYields(IterableDataset[tuple[int, Any]]):
    """The learner's stream, each item with the id of the worker that yielded it (-1 inline)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        wid = -1 if info is None else info.id
        for item in self.stream:
            yield wid, item


def _pairs(loader: Any) -> list[tuple[int, int]]:
    out: list[tuple[Any, Any]] = []
    for wids, items in loader:
        out.extend(zip(wids.tolist(), items.tolist(), strict=True))
    return [(int(w), int(i)) for w, i in out]


@checker("Exercise 1", "an instance of your IterableDataset class, e.g. EachItemOnce(101)")
def _exercise_1(stream: Any) -> str:
    require(
        isinstance(stream, IterableDataset),
        f"got {type(stream).__name__}: pass an instance of your class (a subclass of "
        "torch.utils.data.IterableDataset), such as EachItemOnce(101)",
    )
    n = getattr(stream, "n", None)
    require(
        isinstance(n, int) and n >= 3,
        "give the class an attribute n (the number of items, 0 to n - 1), as in the notebook's "
        "streams, and make it at least 3, e.g. EachItemOnce(101)",
    )
    assert isinstance(n, int)
    try:
        inline = sorted(item for _, item in _pairs(DataLoader(_WhoYields(stream), batch_size=8)))
    except AttributeError as e:
        require(False, f"without workers (num_workers=0) __iter__ raised AttributeError: {e}; "
                "get_worker_info() is None there: then yield every item")  # fmt: skip
    require(
        inline == list(range(n)),
        f"without workers (num_workers=0) the stream gave {len(inline)} items, not 0 to {n - 1} "
        "once each: when get_worker_info() is None, yield everything",
    )
    yielded = {}
    for workers in (2, 3):  # a split hard-wired to 2 workers fails with 3
        yielded[workers] = _each_once_over(stream, n, workers)
    per_worker = yielded[2]
    return (
        f"{n} items, each once over 2 process workers (worker 0 yielded {per_worker[0]}, "
        f"worker 1 {per_worker[1]}) and over 3, and all of them without workers."
    )


def _each_once_over(stream: Any, n: int, workers: int) -> Counter[int]:
    """Run ``stream`` in ``workers`` process workers; require each of 0..n-1 once, every worker
    yielding some. Returns the number of items each worker yielded."""
    with warnings.catch_warnings():
        # torch's front warns when workers outnumber the cores (3 on a 2-core machine): the
        # check wants 3 workers whatever the machine
        warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)
        with DataLoader(_WhoYields(stream), batch_size=8, num_workers=workers) as loader:
            require(loader.worker_backend == "process", "run it in process workers")
            pairs = _pairs(loader)
    counts = Counter(item for _, item in pairs)
    twice = sorted(i for i, c in counts.items() if c > 1)
    first = twice[0] if twice else -1
    split = (
        " (does the split assume 2 workers? take the count from get_worker_info().num_workers)"
        if workers != 2
        else ""
    )
    require(
        not twice,
        f"with {workers} workers item {first} came {counts[first]} times ({len(pairs)} items "
        f"for {n}): each worker iterates the whole dataset unless __iter__ splits the work by "
        f"get_worker_info().id and .num_workers{split}",
    )
    missing = sorted(set(range(n)) - set(counts))
    require(
        not missing,
        f"with {workers} workers item(s) {missing[:3]} never came ({len(pairs)} of {n}): the "
        "workers' parts must cover 0 to n - 1 (round the part size up, or take every "
        f"num_workers-th item){split}",
    )
    require(
        sorted(counts) == list(range(n)),
        f"with {workers} workers the stream gave items outside 0 to {n - 1}",
    )
    per_worker = Counter(w for w, _ in pairs)
    idle = [w for w in range(workers) if not per_worker[w]]
    require(
        not idle,
        f"with {workers} workers, worker {idle[0] if idle else -1} yielded nothing: split the "
        "items between the workers, so that every one does part of the work",
    )
    return per_worker


def exercise_1(stream: Any) -> Check:
    """Check an ``IterableDataset`` that yields ``0 .. n - 1`` once in total over its process
    workers (and all of them without workers).

    Example:
        >>> class Once(torch.utils.data.IterableDataset):
        ...     def __init__(self, n): self.n = n
        ...     def __iter__(self):
        ...         info = torch.utils.data.get_worker_info()
        ...         if info is None:
        ...             return iter(range(self.n))
        ...         return iter(range(info.id, self.n, info.num_workers))
        >>> bool(exercise_1(Once(11)))
        True
    """
    return _exercise_1(stream)
