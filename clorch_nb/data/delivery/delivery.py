"""What happens to a batch between the epoch and the loop: ``pin_memory=`` and ``device=``, set up
once per loader from its :class:`~clorch_nb.data.config.LoaderConfig`.

:class:`Delivery` is made when the loader is (so a bad ``device=`` is refused by
``dataloader()``, and ``pin_memory=True`` without a GPU warns once, there) and gives the loader:

1. **the arena** its process workers' batches arrive in (:meth:`Delivery.parent_arena`): with
   the registered-arena path, slots page-locked once (:class:`~clorch_nb.data.delivery.pinning.
   RegisteredArena`);
2. **the stages** the epoch applies to each batch as it is received (:attr:`Delivery.stages`):
   the pin stage when batches stay on the host;
3. **the device feed** around the epoch's batches (:meth:`Delivery.wrap`), with a CUDA
   ``device``: pins on its helper thread (or not at all, for registered slots), copies
   ``prefetch_to_device`` batches ahead, and sends each copy's times as a
   :class:`~clorch_nb.instrumentation.CopyEvent`. :attr:`Delivery.ahead` is what a saved
   position must not count as delivered yet.

``device="cpu"`` (and no ``device``) adds no feed: the batches are already there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from clorch_nb.data.config import LoaderConfig
from clorch_nb.data.delivery.cuda_seam import CudaSeam, default_cuda
from clorch_nb.data.delivery.device_feed import DeviceFeed, resolve_device
from clorch_nb.data.delivery.pinning import (
    PinReport,
    PinStage,
    RegisteredArena,
    check_pin_memory,
    pin_path,
)
from clorch_nb.data.workers.arena import ParentArena
from clorch_nb.instrumentation import EventBus

__all__ = ["Delivery"]


class Delivery:
    """A loader's pinning and device copy (the module docstring says what each part does).

    Args:
        config (LoaderConfig): ``pin_memory``, ``device``, ``prefetch_to_device``.
        worker_backend ("inline" | "thread" | "process"): where batches are built (decides the
            pinning path).
        events (EventBus): where copy events go (only while someone subscribes).
        cuda (CudaSeam | None): default :func:`~clorch_nb.data.delivery.cuda_seam.default_cuda`.

    Attributes:
        device (torch.device | None): the checked ``device``.
        report (PinReport): the pinning path and what it did (``describe()``).

    Raises:
        ConfigError: ``device`` is not usable here (e.g. ``"cuda"`` without a GPU).

    Example:
        >>> from clorch_nb.data.delivery.cuda_seam import FakeCuda
        >>> d = Delivery(LoaderConfig(pin_memory=True, device="cuda"), "process", EventBus(),
        ...              cuda=FakeCuda())
        >>> print(d.describe())
        pin_memory: registered arena (0 slots, 0.0 MiB page-locked); 0 batches pinned without a
        copy, 0 copied (0.0 MiB); device: cuda, 2 batches copied ahead on a side stream
        >>> Delivery(LoaderConfig(device="cpu"), "thread", EventBus()).describe()
        'pin_memory: off; device: cpu (no copy)'
    """

    def __init__(
        self,
        config: LoaderConfig,
        worker_backend: str,
        events: EventBus,
        *,
        cuda: CudaSeam | None = None,
    ) -> None:
        self.cuda = cuda or default_cuda()
        self.device = resolve_device(config.device, self.cuda)
        self._to_cuda = self.device is not None and self.device.type == "cuda"
        pin = check_pin_memory(config.pin_memory, self.cuda)  # warns once, here
        if config.pin_memory and not pin:
            self.report = PinReport("unpinned")
        else:
            self.report = PinReport(pin_path(pin, worker_backend, self.cuda))
        self.pin = PinStage(self.cuda, self.report) if pin else None
        self.prefetch_to_device = config.prefetch_to_device
        self._events = events
        self._feed: DeviceFeed | None = None

    @property
    def stages(self) -> tuple[Callable[[Any], Any], ...]:
        """Per-batch stages for the epoch: the pin stage when batches stay on the host (with a
        CUDA ``device`` the feed pins, on its helper thread)."""
        return (self.pin,) if self.pin is not None and not self._to_cuda else ()

    def parent_arena(self) -> Callable[[], ParentArena] | None:
        """How a process pool makes the parent's side of each worker's arena: registered slots
        on the registered-arena path, None (the plain :class:`ParentArena`) otherwise."""
        if self.report.path != "registered arena":
            return None
        cuda, report = self.cuda, self.report
        return lambda: RegisteredArena(cuda, report)

    def wrap(self, batches: Iterator[Any], *, epoch: int, start: int) -> Iterator[Any]:
        """The epoch's batches as the loop gets them: through a new device feed with a CUDA
        ``device``, else ``batches`` itself."""
        if not self._to_cuda:
            return batches
        assert self.device is not None
        self.close()  # the previous epoch's feed (its copies in flight)
        events = self._events
        self._feed = DeviceFeed(
            self.device,
            self.cuda,
            pin=self.pin,
            prefetch_to_device=self.prefetch_to_device,
            on_copy=lambda ev: events.emit(ev) if events else None,
        )
        return self._feed.iterate(batches, epoch=epoch, start=start)

    @property
    def ahead(self) -> int:
        """Batches the epoch delivered that the loop has not got yet (in the device feed)."""
        return 0 if self._feed is None else self._feed.ahead

    def describe(self) -> str:
        """The pinning path (and what it did so far) and the device, in a line or two."""
        if self.device is None:
            dev = "device: none (batches stay where they are built)"
        elif self._to_cuda:
            dev = (
                f"device: {self.device}, {self.prefetch_to_device} batches copied ahead on a "
                "side stream"
            )
        else:
            dev = f"device: {self.device} (no copy)"
        return f"{self.report.describe()}; {dev}"

    def close(self) -> None:
        """Wait for copies in flight and stop the pin thread; idempotent."""
        feed, self._feed = self._feed, None
        if feed is not None:
            feed.close()
        elif self.pin is not None:
            self.pin.close()
