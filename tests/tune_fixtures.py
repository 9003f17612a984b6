"""Synthetic datasets of known cost for the autotuner tests, importable by process workers
(``process_spec={"factory": "tests.tune_fixtures:...", ...}``)."""

from __future__ import annotations

import ctypes
import time
from typing import Any

import torch

from clorch_nb import data


def _spec(name: str, *args: Any) -> dict[str, Any]:
    return {"factory": f"tests.tune_fixtures:{name}", "args": list(args)}


def gil_held(n: int, sleep_s: float) -> Any:
    """Items that hold the GIL for ``sleep_s`` each without using the CPU: libc's ``usleep``
    called through ``ctypes.PyDLL``, which (unlike ``ctypes.CDLL``) keeps the GIL, like a C
    extension that never releases it. The cost is known whatever the machine's load, which
    pure-Python CPU work on a shared 2-core machine is not: threads cannot overlap these items,
    processes can."""
    usleep = ctypes.PyDLL(None).usleep
    usleep.argtypes = [ctypes.c_uint]
    micros = int(sleep_s * 1e6)

    def get_item(i: int) -> dict[str, Any]:
        usleep(micros)
        return {"x": torch.tensor(float(i)), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("gil_held", n, sleep_s))


def gil_bound(n: int, loops: int) -> Any:
    """Items that hold the GIL: ``loops`` rounds of a pure-Python loop each (no I/O, no torch)."""

    def get_item(i: int) -> dict[str, Any]:
        acc = 0
        for k in range(loops):
            acc += (k * i) % 7
        return {"x": torch.tensor(float(acc)), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("gil_bound", n, loops))


def sleepy(n: int, sleep_s: float) -> Any:
    """Items that wait without the GIL (``time.sleep``, like a read from disk or network)."""

    def get_item(i: int) -> dict[str, Any]:
        time.sleep(sleep_s)
        return {"x": torch.tensor(float(i)), "target": torch.tensor(i)}

    return data.dataset(size=n, get_item=get_item, process_spec=_spec("sleepy", n, sleep_s))


def trivial(n: int) -> Any:
    """Items that cost nothing: a tensor dataset (batched fast path)."""
    return data.tensor_dataset(torch.zeros(n, 4), torch.arange(n), process_spec=_spec("trivial", n))


def slow_start(n: int, start_s: float, sleep_s: float) -> Any:
    """:func:`sleepy` items from a dataset that takes ``start_s`` to build in a worker process
    (like one that opens files or loads an index as it starts): a process probe's start-up."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        time.sleep(start_s)

    def get_item(i: int) -> dict[str, Any]:
        time.sleep(sleep_s)
        return {"x": torch.tensor(float(i)), "target": torch.tensor(i)}

    return data.dataset(
        size=n, get_item=get_item, process_spec=_spec("slow_start", n, start_s, sleep_s)
    )
