"""The one place that calls ``torch.cuda``: availability, host-memory registration, pinned
buffers, streams, events and copies, behind a small object the loader is handed.

Everything above it (:mod:`~clorch_nb.data.delivery.pinning`,
:mod:`~clorch_nb.data.delivery.device_feed`) talks to a :class:`CudaSeam`, never to ``torch.cuda``.
So the logic of feeding a GPU (which path pins, which stream copies, who waits on which event, when
a host buffer may be reused) is tested on a machine without a GPU with :class:`FakeCuda`, which logs
every call and copies "to the device" by cloning on the CPU; tests marked ``cuda`` run the same code
on :class:`TorchCuda`.

Streams and events are torch's own objects (``torch.cuda.Stream``, ``torch.cuda.Event``): the
seam only makes them, so the code above uses their methods (``record``, ``wait_event``,
``query``, ``synchronize``, ``elapsed_time``) and the fake's have the same names.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["CudaSeam", "FakeCuda", "TorchCuda", "default_cuda", "use_cuda"]

#: ``cudaHostRegisterPortable``: the registration is seen by every CUDA context (any device)
HOST_REGISTER_PORTABLE = 1


class CudaSeam:
    """What the loader asks of CUDA. :class:`TorchCuda` does it; :class:`FakeCuda` pretends.

    Methods raise or return what ``torch.cuda`` would; see each implementation.
    """

    name = "abstract"

    def available(self) -> bool:
        """True when a CUDA device can be used (``torch.cuda.is_available()``)."""
        raise NotImplementedError

    def device_count(self) -> int:
        """Visible CUDA devices (``torch.cuda.device_count()``)."""
        raise NotImplementedError

    def host_register(self, addr: int, nbytes: int) -> int:
        """Page-lock ``nbytes`` of host memory at ``addr`` (``cudaHostRegister``); returns the
        CUDA error code, 0 on success."""
        raise NotImplementedError

    def host_unregister(self, addr: int) -> int:
        """Undo :meth:`host_register` (``cudaHostUnregister``); returns the CUDA error code."""
        raise NotImplementedError

    def pinned_empty(self, nbytes: int) -> torch.Tensor:
        """An uninitialised page-locked uint8 tensor of ``nbytes`` bytes."""
        raise NotImplementedError

    def is_pinned(self, t: torch.Tensor) -> bool:
        """Whether ``t``'s memory is page-locked (allocated pinned or registered)."""
        raise NotImplementedError

    def new_stream(self, device: torch.device) -> Any:
        """A new stream on ``device`` (the side stream the copies run on)."""
        raise NotImplementedError

    def current_stream(self, device: torch.device) -> Any:
        """The stream the consumer's kernels go to (``torch.cuda.current_stream``)."""
        raise NotImplementedError

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """A context in which work goes to ``stream`` (``torch.cuda.stream``)."""
        raise NotImplementedError

    def new_event(self) -> Any:
        """A timing event (``torch.cuda.Event(enable_timing=True)``)."""
        raise NotImplementedError

    def copy_to(self, t: torch.Tensor, device: torch.device, *, non_blocking: bool) -> torch.Tensor:
        """``t.to(device, non_blocking=...)`` on the current stream."""
        raise NotImplementedError

    def record_stream(self, t: torch.Tensor, stream: Any) -> None:
        """Tell the caching allocator ``t`` is used on ``stream`` (``Tensor.record_stream``): its
        memory is not reused before the work queued there so far has finished."""
        raise NotImplementedError


class TorchCuda(CudaSeam):
    """The real thing: ``torch.cuda`` (and its ``cudart()`` binding for host registration).

    Example:
        >>> TorchCuda().available() == torch.cuda.is_available()
        True
    """

    name = "torch.cuda"

    def available(self) -> bool:
        """:meth:`CudaSeam.available`, done by ``torch.cuda``."""
        return torch.cuda.is_available()

    def device_count(self) -> int:
        """:meth:`CudaSeam.device_count`, done by ``torch.cuda``."""
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def host_register(self, addr: int, nbytes: int) -> int:
        """:meth:`CudaSeam.host_register`, done by ``torch.cuda``."""
        return int(torch.cuda.cudart().cudaHostRegister(addr, nbytes, HOST_REGISTER_PORTABLE))

    def host_unregister(self, addr: int) -> int:
        """:meth:`CudaSeam.host_unregister`, done by ``torch.cuda``."""
        return int(torch.cuda.cudart().cudaHostUnregister(addr))

    def pinned_empty(self, nbytes: int) -> torch.Tensor:
        """:meth:`CudaSeam.pinned_empty`, done by ``torch.cuda``."""
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def is_pinned(self, t: torch.Tensor) -> bool:
        """:meth:`CudaSeam.is_pinned`, done by ``torch.cuda``."""
        return bool(t.is_pinned())

    def new_stream(self, device: torch.device) -> Any:
        """:meth:`CudaSeam.new_stream`, done by ``torch.cuda``."""
        return torch.cuda.Stream(device=device)

    def current_stream(self, device: torch.device) -> Any:
        """:meth:`CudaSeam.current_stream`, done by ``torch.cuda``."""
        return torch.cuda.current_stream(device)

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """:meth:`CudaSeam.use_stream`, done by ``torch.cuda``."""
        return torch.cuda.stream(stream)

    def new_event(self) -> Any:
        """:meth:`CudaSeam.new_event`, done by ``torch.cuda``."""
        return torch.cuda.Event(enable_timing=True)

    def copy_to(self, t: torch.Tensor, device: torch.device, *, non_blocking: bool) -> torch.Tensor:
        """:meth:`CudaSeam.copy_to`, done by ``torch.cuda``."""
        return t.to(device, non_blocking=non_blocking)

    def record_stream(self, t: torch.Tensor, stream: Any) -> None:
        """:meth:`CudaSeam.record_stream`, done by ``torch.cuda``."""
        t.record_stream(stream)


class FakeStream:
    """A stream of :class:`FakeCuda`: a name, and the events it was told to wait for."""

    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name, self._log = name, log

    def wait_event(self, event: FakeEvent) -> None:
        """Log that work queued on this stream from now on waits for ``event``."""
        self._log.append(("wait_event", self.name, event.id))

    def __repr__(self) -> str:
        return f"FakeStream({self.name!r})"


class FakeEvent:
    """An event of :class:`FakeCuda`: recorded at a step of the fake clock; done when the fake
    says so (``FakeCuda.pending`` holds it back)."""

    def __init__(self, cuda: FakeCuda, eid: int) -> None:
        self.cuda, self.id = cuda, eid
        self.t_ms: float | None = None
        self.stream: str | None = None

    def record(self, stream: FakeStream | None = None) -> None:
        """Record on ``stream`` (default: the current one) at the fake clock's next tick."""
        self.stream = (stream or self.cuda.current).name
        self.t_ms = self.cuda.tick()
        self.cuda.log.append(("record", self.stream, self.id))

    def query(self) -> bool:
        """True unless the fake holds events back (``FakeCuda.pending``)."""
        return not self.cuda.pending

    def synchronize(self) -> None:
        """Wait for the event: the fake logs it and lets every held event finish."""
        self.cuda.log.append(("synchronize", self.id))
        self.cuda.pending = False

    def elapsed_time(self, end: FakeEvent) -> float:
        """Milliseconds from this event to ``end`` on the fake clock."""
        assert self.t_ms is not None and end.t_ms is not None, "record both events first"
        return end.t_ms - self.t_ms


class FakeCuda(CudaSeam):
    """A CUDA that runs on the CPU, for tests: it logs every call in :attr:`log`, copies "to the
    device" by cloning, and can be told to refuse registration or hold events back.

    Args:
        available (bool): what :meth:`available` answers.
        register_error (int): the error code :meth:`host_register` returns (0: success).
        devices (int): what :meth:`device_count` answers.

    Attributes:
        log (list[tuple]): ``("register", addr, nbytes)``, ``("copy", stream, nbytes)``,
            ``("record", stream, event id)``, ``("wait_event", stream, event id)``,
            ``("record_stream", stream, nbytes)``, ... in call order.
        registered (dict[int, int]): address -> bytes, currently registered.
        pending (bool): while True, events are not done (``query()`` is False).

    Example:
        >>> cuda = FakeCuda()
        >>> side = cuda.new_stream(torch.device("cuda"))
        >>> with cuda.use_stream(side):
        ...     y = cuda.copy_to(torch.ones(2), torch.device("cuda"), non_blocking=True)
        >>> cuda.log
        [('copy', 'side 0', 8, True)]
    """

    name = "fake"

    def __init__(self, *, available: bool = True, register_error: int = 0, devices: int = 1):
        self._available, self.register_error, self._devices = available, register_error, devices
        self.log: list[tuple[Any, ...]] = []
        self.registered: dict[int, int] = {}
        self.pending = False
        self._clock_ms = 0.0
        self._n_streams = self._n_events = 0
        self.default = FakeStream("default", self.log)
        self.current = self.default
        self._pinned: list[tuple[weakref.ref[torch.Tensor], int, int]] = []

    def tick(self) -> float:
        """Advance the fake clock by 1 ms; returns the new time."""
        self._clock_ms += 1.0
        return self._clock_ms

    def available(self) -> bool:
        """:meth:`CudaSeam.available`, pretended on the CPU and logged."""
        return self._available

    def device_count(self) -> int:
        """:meth:`CudaSeam.device_count`, pretended on the CPU and logged."""
        return self._devices if self._available else 0

    def host_register(self, addr: int, nbytes: int) -> int:
        """:meth:`CudaSeam.host_register`, pretended on the CPU and logged."""
        self.log.append(("register", addr, nbytes))
        if not self.register_error:
            self.registered[addr] = nbytes
        return self.register_error

    def host_unregister(self, addr: int) -> int:
        """:meth:`CudaSeam.host_unregister`, pretended on the CPU and logged."""
        self.log.append(("unregister", addr))
        return 0 if self.registered.pop(addr, None) is not None else 1

    def pinned_empty(self, nbytes: int) -> torch.Tensor:
        """:meth:`CudaSeam.pinned_empty`, pretended on the CPU and logged."""
        t = torch.empty(nbytes, dtype=torch.uint8)
        self.log.append(("pinned_empty", nbytes))
        self._pinned.append((weakref.ref(t), t.data_ptr(), nbytes))
        return t

    def is_pinned(self, t: torch.Tensor) -> bool:
        """:meth:`CudaSeam.is_pinned`, pretended on the CPU and logged."""
        p = t.data_ptr()
        if any(a <= p < a + n for a, n in self.registered.items()):
            return True
        # buffers from pinned_empty() that are still alive (a freed one's address is reused)
        return any(r() is not None and a <= p < a + n for r, a, n in self._pinned)

    def new_stream(self, device: torch.device) -> FakeStream:
        """:meth:`CudaSeam.new_stream`, pretended on the CPU and logged."""
        s = FakeStream(f"side {self._n_streams}", self.log)
        self._n_streams += 1
        return s

    def current_stream(self, device: torch.device) -> FakeStream:
        """:meth:`CudaSeam.current_stream`, pretended on the CPU and logged."""
        return self.current

    @contextlib.contextmanager
    def _use(self, stream: FakeStream) -> Iterator[FakeStream]:
        before, self.current = self.current, stream
        try:
            yield stream
        finally:
            self.current = before

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """:meth:`CudaSeam.use_stream`, pretended on the CPU and logged."""
        return self._use(stream)

    def new_event(self) -> FakeEvent:
        """:meth:`CudaSeam.new_event`, pretended on the CPU and logged."""
        self._n_events += 1
        return FakeEvent(self, self._n_events)

    def copy_to(self, t: torch.Tensor, device: torch.device, *, non_blocking: bool) -> torch.Tensor:
        """:meth:`CudaSeam.copy_to`, pretended on the CPU and logged."""
        self.log.append(("copy", self.current.name, t.numel() * t.element_size(), non_blocking))
        return t.clone()

    def record_stream(self, t: torch.Tensor, stream: Any) -> None:
        """:meth:`CudaSeam.record_stream`, pretended on the CPU and logged."""
        self.log.append(("record_stream", stream.name, t.numel() * t.element_size()))


_current: CudaSeam = TorchCuda()


def default_cuda() -> CudaSeam:
    """The seam a loader takes when it is made: :class:`TorchCuda`, unless inside
    :func:`use_cuda`.

    Example:
        >>> default_cuda().name
        'torch.cuda'
    """
    return _current


@contextlib.contextmanager
def use_cuda(seam: CudaSeam) -> Iterator[CudaSeam]:
    """Loaders made inside this block use ``seam`` (e.g. a :class:`FakeCuda`, so the loader's
    pinning and device paths run on a machine without a GPU); each keeps it for its life.

    Example:
        >>> with use_cuda(FakeCuda()) as fake:
        ...     default_cuda() is fake
        True
        >>> default_cuda().name
        'torch.cuda'
    """
    global _current
    before, _current = _current, seam
    try:
        yield seam
    finally:
        _current = before
