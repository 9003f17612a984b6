"""The soak's consumers: each drives one episode's loader the way its ``consumer`` says."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable
from typing import Any

import psutil

from clorch_nb import data
from clorch_nb.errors import LoaderClosedError, StaleIteratorError
from clorch_nb.instrumentation import BatchEvent
from tests.soak.episode import Episode, Outcome, close_later, make_loader, targets
from tests.soak.faults import ENV_NAME

__all__ = ["drive"]

#: arms a real SIGINT to the main thread after a delay; returns a function that disarms it and
#: absorbs one that landed late (run.py)
Armer = Callable[[float], Callable[[], None]]


def _epoch(
    dl: data.DataLoader,
    out: Outcome,
    *,
    stop_after: int | None = None,
    hold: bool = False,
) -> Any:
    """Consume one epoch into ``out``; returns the iterator (still open if stopped early)."""
    seen: list[int] = []
    held: list[Any] = []
    level = str(len(out.epochs))
    fault_env = out.env_fault
    if fault_env:  # a changed environment (B45): every batch must carry this epoch's value
        os.environ[ENV_NAME] = level
    out.epochs.append(seen)
    out.complete.append(stop_after is None)
    out.errors.append(None)
    it = None
    try:
        it = iter(dl)
        for i, batch in enumerate(it):
            seen.extend(targets(batch))
            if fault_env and {float(v) for v in batch["data"][:, 0]} != {float(level)}:
                out.notes.append(
                    f"epoch {level}: batch {i} carries {ENV_NAME}="
                    f"{sorted({float(v) for v in batch['data'][:, 0]})}, the kernel set {level}"
                )
            if hold:
                held.append(batch)
            if stop_after is not None and i + 1 >= stop_after:
                break
    except BaseException as exc:  # noqa: BLE001 - judged by the checks
        out.errors[-1] = exc
    return it


def _close_fully(dl: data.DataLoader) -> None:
    """close(); a KeyboardInterrupt inside it (the SIGINT episode) is followed by a second
    close(), which must finish the job."""
    try:
        dl.close()
    except KeyboardInterrupt:
        dl.close()


def drive(ep: Episode, arm: Armer) -> Outcome:
    """Run episode ``ep``; returns what its consumer saw (errors included, never raised)."""
    out = Outcome(env_fault=ep.fault == "env")
    if ep.consumer == "drop":
        _drop(ep, out)
        return out
    dl = make_loader(ep)
    try:
        _drive(ep, dl, out, arm)
    finally:
        _close_fully(dl)
    return out


def _drop(ep: Episode, out: Outcome) -> None:
    """Take ``k`` batches, then drop the loader without close(), keeping its error (if any)
    alive as a notebook's ``sys.last_value`` does: its workers must stop anyway."""
    seen: list[int] = []
    out.epochs.append(seen)
    out.complete.append(False)
    out.errors.append(None)
    dl = make_loader(ep)
    it = None
    try:
        # inside the try: an endless sampler whose last batch is its first is refused at iter()
        it = iter(dl)
        for i, batch in enumerate(it):
            seen.extend(targets(batch))
            if i + 1 >= max(ep.k, 1):
                break
    except BaseException as exc:  # noqa: BLE001 - judged by the checks
        out.errors[-1] = exc
        out.kept.append(exc)
    del it, dl  # this frame stays in the kept error's traceback: it must not hold the loader
    gc.collect()


def _drive(ep: Episode, dl: data.DataLoader, out: Outcome, arm: Armer) -> None:
    c = ep.consumer
    if c in ("full", "hold"):
        _epoch(dl, out, hold=c == "hold")
    elif c == "break":
        _epoch(dl, out, stop_after=max(ep.k, 1))
        _epoch(dl, out)
    elif c == "reiterate":
        it = _epoch(dl, out, stop_after=max(ep.k, 1))
        _epoch(dl, out)
        if out.errors[0] is None:
            _check_superseded(it, finished=it.delivered >= len(it), notes=out.notes)
    elif c == "close_mid":
        it = _epoch(dl, out, stop_after=max(ep.k, 1))
        dl.close()
        if out.errors[0] is None:
            _check_superseded(it, finished=it.delivered >= len(it), notes=out.notes)
        _epoch(dl, out)
    elif c == "close_thread":
        closer = close_later(dl, ep.delay_s, out.notes)
        _epoch(dl, out)
        out.complete[-1] = False
        closer.join(60.0)
        if closer.is_alive():
            out.notes.append("close() from another thread did not return within 60 s")
    elif c == "close_callback":

        def close_at_k(ev: Any) -> None:
            if isinstance(ev, BatchEvent) and ev.batch_index == ep.k:
                dl.close()

        unsubscribe = dl.subscribe(close_at_k)
        _epoch(dl, out)
        out.complete[-1] = False
        unsubscribe()
        _epoch(dl, out)
    elif c == "rerun":
        _rerun(ep, dl, out)
    elif c == "sigint":
        _sigint_epoch(ep, dl, out, arm)
        _epoch(dl, out)  # the loader (and the forkserver) still work afterwards
    else:  # pragma: no cover - CONSUMERS lists them all
        raise ValueError(f"consumer={c!r}")


def _forkserver_children() -> int:
    from multiprocessing import forkserver

    server = getattr(forkserver._forkserver, "_forkserver_pid", None)
    count = 0
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.ppid() == server and p.status() != psutil.STATUS_ZOMBIE:
                count += 1
    return count


def _rerun(ep: Episode, dl: data.DataLoader, out: Outcome) -> None:
    """A cell that builds a loader and shows it, run 3 times: every loader stays alive (as in
    IPython's ``Out``); live process workers must stay at one loader's worth (B46)."""
    twins = [dl]
    try:
        _epoch(dl, out)
        for _ in range(2):
            twins.append(make_loader(ep))
            _epoch(twins[-1], out)
            live = _forkserver_children()
            if ep.backend == "process" and live > ep.num_workers:
                out.notes.append(
                    f"{len(twins)} twin loaders (a re-run cell) hold {live} worker processes; "
                    f"one loader's worth is {ep.num_workers}"
                )
    finally:
        for twin in twins[1:]:
            _close_fully(twin)


def _check_superseded(it: Any, *, finished: bool, notes: list[str]) -> None:
    """An iterator whose epoch a new ``iter()`` stopped must say so (``StaleIteratorError``,
    B21): never yield again, never end as if its epoch were complete."""
    try:
        next(it)
    except (StaleIteratorError, LoaderClosedError):  # B56: it says why, every time
        return
    except StopIteration:
        if not finished:
            notes.append("an iterator replaced by a new iter() ended silently mid-epoch")
        return
    notes.append("an iterator replaced by a new iter() still yielded a batch")


def _sigint_epoch(ep: Episode, dl: data.DataLoader, out: Outcome, arm: Armer) -> None:
    disarm = arm(ep.delay_s)
    try:
        try:
            _epoch(dl, out)
            out.complete[-1] = False
            dl.close()  # the SIGINT may land in here too
        except KeyboardInterrupt as exc:  # landed in the consumer's own code or in close()
            if not out.epochs:  # landed before _epoch recorded anything
                out.epochs.append([])
            n = len(out.epochs)  # landed between _epoch's records: make them line up
            out.complete += [False] * (n - len(out.complete))
            out.errors += [None] * (n - len(out.errors))
            out.errors[-1] = out.errors[-1] or exc
            out.complete[-1] = False
    finally:
        disarm()
    _close_fully(dl)  # a second close() finishes whatever the interrupt cut short
