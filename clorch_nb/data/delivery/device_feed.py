"""``device=``: each batch copied to the device on a side stream, a few batches ahead of the loop.

:class:`DeviceFeed` turns a stream of host batches into a stream of device batches:

1. **issue**: a batch received from the loader is pinned (:class:`~clorch_nb.data.delivery.pinning.
   PinStage`; on the helper thread for the pinned ring) and its tensors copied to the device
   on the feed's side stream, ``non_blocking`` from pinned memory, bracketed by two events;
   ``prefetch_to_device`` batches (default 2) are issued ahead of the one the loop gets;
2. **hand over**: the consumer's stream waits on the batch's copy event (on the device: the
   host never blocks), and each device tensor is marked used there (``record_stream``): the
   caching allocator cannot give its memory to a later batch's copy while the loop's kernels
   may still read it (the corruption SPDL documents for prefetchers without it);
3. **retire**: the host batch is held until its copy has finished (``event.query()``), so a
   pinned buffer or arena slot is never refilled under a copy still reading it; the copy's
   times then go out as a :class:`~clorch_nb.instrumentation.CopyEvent` (the host-to-device
   lane of the timeline).

Non-tensor fields (strings, numbers, lists of ids) stay on the host; tensors are found at any
depth of mappings, lists, tuples, namedtuples and dataclasses (the batch walker,
:func:`clorch_nb._tree.map_tensors`); an object of another kind that holds tensors is left on
the host with a warning naming it.
``device="cpu"`` needs none of this: :func:`resolve_device` accepts it and the loader adds no
stage. Every CUDA call goes through :mod:`~clorch_nb.data.delivery.cuda_seam`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from clorch_nb._tree import map_tensors, unwalked_warning
from clorch_nb.data.delivery.cuda_seam import CudaSeam
from clorch_nb.data.delivery.pinning import PinStage
from clorch_nb.errors import ConfigError, LoaderClosedError, StaleIteratorError
from clorch_nb.instrumentation import CopyEvent

__all__ = ["DeviceFeed", "resolve_device"]


def resolve_device(device: Any, cuda: CudaSeam) -> torch.device | None:
    """``device=`` checked: None (batches stay where the loader builds them), ``cpu``, or a CUDA
    device that exists here.

    Args:
        device (str | torch.device | None): e.g. ``"cuda"``, ``"cuda:1"``, ``"cpu"``.
        cuda (CudaSeam): what says whether CUDA is there.

    Returns:
        torch.device | None: the device; ``cuda`` without an index becomes the current one's
        index at copy time (as ``Tensor.to("cuda")`` does).

    Raises:
        ConfigError: not a device, a device type other than cpu/cuda, CUDA asked for on a
            machine without it, or an index beyond the visible devices.

    Example:
        >>> from clorch_nb.data.delivery.cuda_seam import FakeCuda
        >>> resolve_device("cpu", FakeCuda()), resolve_device("cuda:0", FakeCuda())
        (device(type='cpu'), device(type='cuda', index=0))
        >>> resolve_device("cuda", FakeCuda(available=False))
        Traceback (most recent call last):
        ...
        clorch_nb.errors.ConfigError: device='cuda' needs a CUDA GPU, and this machine has none ...
    """
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(
            f"device={device!r} is not a device; pass 'cuda', 'cuda:1' or 'cpu' (or drop it "
            "to keep batches where the loader builds them)"
        ) from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ConfigError(
            f"device={device!r}: the loader copies batches to 'cuda' devices (or keeps them on "
            f"'cpu'); for {dev.type!r}, move the batch yourself: batch.to({str(dev)!r})"
        )
    if not cuda.available():
        raise ConfigError(
            f"device={device!r} needs a CUDA GPU, and this machine has none "
            "(torch.cuda.is_available() is False). Drop device= (or pass device='cpu') to "
            "train on the CPU, or run on a machine with a GPU and a CUDA build of torch"
        )
    if dev.index is not None and dev.index >= cuda.device_count():
        raise ConfigError(
            f"device={device!r}: only {cuda.device_count()} CUDA device(s) are visible "
            f"(cuda:0 .. cuda:{cuda.device_count() - 1}); check CUDA_VISIBLE_DEVICES"
        )
    return dev


class _Flight:
    """One batch between issue and retire."""

    __slots__ = (
        "copies", "dev", "done", "epoch", "host", "index", "nbytes", "needed", "start", "t_issued"
    )  # fmt: skip

    def __init__(self, epoch: int, index: int, host: Any) -> None:
        self.epoch, self.index, self.host = epoch, index, host  # host: a batch or a Future
        self.dev: Any = None
        self.copies: list[torch.Tensor] = []  # the device tensors made by this batch's copy
        self.start: Any = None
        self.done: Any = None
        self.needed: Any = None
        self.nbytes = 0
        self.t_issued = 0.0


class DeviceFeed:
    """Copies batches to a CUDA device ahead of the loop (the module docstring says how).

    Args:
        device (torch.device): a CUDA device (from :func:`resolve_device`).
        cuda (CudaSeam): every CUDA call goes through it.
        pin (PinStage | None): pins batches first (``pin_memory=True``); None copies from
            wherever they are (pageable: synchronous copies).
        prefetch_to_device (int): batches issued ahead of the one the loop holds, >= 0.
        on_copy (Callable[[CopyEvent], None] | None): gets each finished copy's times.

    Attributes:
        ahead (int): batches taken from the source and never handed to the loop (copied ahead,
            or dropped when the epoch stopped early): what a resume must deliver again.

    Example:
        >>> from clorch_nb.data.delivery.cuda_seam import FakeCuda
        >>> cuda = FakeCuda()
        >>> feed = DeviceFeed(torch.device("cuda"), cuda, prefetch_to_device=1)
        >>> [b["x"].tolist() for b in feed.iterate([{"x": torch.ones(1)}, {"x": torch.zeros(1)}])]
        [[1.0], [0.0]]
        >>> [c[0] for c in cuda.log if c[0] in ("copy", "wait_event")]
        ['copy', 'copy', 'wait_event', 'wait_event']
    """

    def __init__(
        self,
        device: torch.device,
        cuda: CudaSeam,
        *,
        pin: PinStage | None = None,
        prefetch_to_device: int = 2,
        on_copy: Callable[[CopyEvent], None] | None = None,
    ) -> None:
        self.device, self.cuda, self.pin = device, cuda, pin
        self.prefetch_to_device, self.on_copy = prefetch_to_device, on_copy
        self._side: Any = None
        self._anchor: tuple[Any, float] | None = None  # (event, perf_counter when it ran)
        self._pending: collections.deque[_Flight] = collections.deque()
        self._retiring: collections.deque[_Flight] = collections.deque()
        self.copies = 0
        self._taken = self._handed = 0
        self._unwalked = unwalked_warning(f"device={str(device)!r}", "stay on the host")

    @property
    def ahead(self) -> int:
        """Batches taken from the source and not handed over (kept after the epoch stops)."""
        return self._taken - self._handed

    def iterate(self, source: Iterable[Any], *, epoch: int = 0, start: int = 0) -> Iterator[Any]:
        """The batches of ``source`` on the device, in order; batch ``k`` of it is recorded as
        batch ``start + k`` of ``epoch``.

        An error from ``source`` (a worker's, a dataset's) is raised where the loop reaches it:
        after the batches taken before it are handed over, as without the feed; a stop
        (``close()``, a newer epoch) is raised at once. Closing the generator waits for the
        copies in flight and closes ``source``."""
        it = iter(source)
        error: Exception | None = None
        try:
            k = start
            while True:
                try:
                    host = next(it)
                except StopIteration:
                    break
                except (LoaderClosedError, StaleIteratorError):
                    raise
                except Exception as exc:  # noqa: BLE001 - re-raised after the batches before it
                    error = exc
                    break
                self._pending.append(_Flight(epoch, k, self._pin_async(host)))
                self._taken += 1
                k += 1
                del host
                self._issue_ready()
                if len(self._pending) > self.prefetch_to_device:
                    yield self._hand_over(self._pending.popleft())
                self._retire(wait=False)
            while self._pending:
                yield self._hand_over(self._pending.popleft())
            if error is not None:
                raise error
        finally:
            error = None  # the traceback must not keep this frame (and the loader) alive
            self._drain()
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def close(self) -> None:
        """Wait for copies in flight, drop what was not handed over, stop the pin thread."""
        self._drain()
        if self.pin is not None:
            self.pin.close()

    # -- 1. issue ---------------------------------------------------------------------------

    def _pin_async(self, host: Any) -> Any:
        if self.pin is None or not self.pin.active:
            return host
        if self.pin.report.path == "pinned ring":  # a real copy: on the helper thread
            return self.pin.submit(host)
        return self.pin(host)  # registered arena: checks only, no copy

    def _issue_ready(self) -> None:
        """Issue the copies of pending batches whose pinning has finished, in order."""
        for f in self._pending:
            if f.dev is not None:
                continue
            if isinstance(f.host, concurrent.futures.Future) and not f.host.done():
                return
            self._issue(f)

    def _issue(self, f: _Flight) -> None:
        cuda = self.cuda
        if isinstance(f.host, concurrent.futures.Future):
            f.host = f.host.result()
        if self._side is None:
            self._side = cuda.new_stream(self.device)
            anchor = cuda.new_event()
            anchor.record(self._side)
            anchor.synchronize()
            self._anchor = (anchor, time.perf_counter())
        f.t_issued = time.perf_counter()
        f.start, f.done = cuda.new_event(), cuda.new_event()
        copies: list[torch.Tensor] = []

        def copy(t: torch.Tensor) -> torch.Tensor:
            if t.device.type != "cpu":
                return t
            copies.append(cuda.copy_to(t, self.device, non_blocking=cuda.is_pinned(t)))
            return copies[-1]

        with cuda.use_stream(self._side):
            f.start.record(self._side)
            f.dev = map_tensors(f.host, copy, on_unwalked=self._unwalked)
            f.done.record(self._side)
        f.copies = copies
        f.nbytes = sum(t.numel() * t.element_size() for t in copies)
        self.copies += 1

    # -- 2. hand over -----------------------------------------------------------------------

    def _hand_over(self, f: _Flight) -> Any:
        if f.dev is None:
            self._issue(f)
        self._handed += 1
        cuda = self.cuda
        consumer = cuda.current_stream(self.device)
        f.needed = cuda.new_event()
        f.needed.record(consumer)  # when the loop's stream gets here: for the copy-wait lane
        consumer.wait_event(f.done)  # on the device; the host goes on
        for t in f.copies:  # allocated on the side stream, used on the consumer's
            cuda.record_stream(t, consumer)
        dev, f.dev, f.copies = f.dev, None, []
        self._retiring.append(f)
        return dev

    # -- 3. retire --------------------------------------------------------------------------

    def _retire(self, *, wait: bool) -> None:
        """Drop the host batches whose copy has finished (all of them, waiting, if ``wait``)."""
        while self._retiring:
            f = self._retiring[0]
            if wait:
                f.done.synchronize()
                f.needed.synchronize()
            elif not (f.done.query() and f.needed.query()):  # never a host sync mid-epoch
                return
            self._retiring.popleft()
            f.host = None
            if self.on_copy is not None:
                self.on_copy(self._copy_event(f))

    def _copy_event(self, f: _Flight) -> CopyEvent:
        assert self._anchor is not None
        anchor, t0 = self._anchor

        def at(ev: Any) -> float:
            return t0 + anchor.elapsed_time(ev) / 1000.0

        return CopyEvent(
            "copy", f.epoch, f.index, f.nbytes, f.t_issued, at(f.start), at(f.done), at(f.needed)
        )

    def _drain(self) -> None:
        for f in self._pending:  # issued, never handed over: wait before dropping the host
            if isinstance(f.host, concurrent.futures.Future):
                f.host.cancel()
            elif f.done is not None:
                f.done.synchronize()
        self._pending.clear()
        self._retire(wait=True)
