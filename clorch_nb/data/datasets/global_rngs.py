"""Snapshots of numpy's global RNG that cost a few microseconds instead of seventy.

The inline loader (``num_workers=0``) seeds the global RNGs for every batch, as a process
worker does, and must then give the caller back exactly the states it had
(:func:`~clorch_nb.data.datasets.worker_info.seeded_globals`). numpy's public way,
``np.random.get_state()`` + ``set_state()``, copies the 624-word Mersenne Twister key one
element at a time through Python objects: 33 + 35 us here, about 70 us of every inline batch
(2026-12-04, numpy 2.4; benchmark 9 at 0 workers spent more time there than reading its
shards). The state itself is 2,516 bytes of C memory:

- the MT19937 state (``uint32 key[624]; int pos``, 2,500 bytes), at the address numpy
  publishes through the bit generator's ctypes interface (``bit_generator.ctypes.state_address``);
- the legacy Gaussian cache of the global ``RandomState`` (``has_gauss``, ``gauss``: the second
  value of the polar method, kept for the next ``np.random.normal``), which numpy exposes only
  through ``get_state``. Its place in the object is found, not assumed: the ``RandomState``
  holds a pointer to its own copy of the bit generator's interface, and the cache follows that
  pointer. Before the fast path is trusted it is checked against the public API (known states
  written with ``set_state`` must read back byte for byte, and a fast restore must give back
  what ``get_state`` reported).

Anything that does not check out (another interpreter than CPython, another bit generator set
with ``np.random.set_bit_generator``, a numpy whose layout moved) takes the public path, with
the same results. :func:`save_numpy_global` and :func:`restore_numpy_global` are what
``seeded_globals`` calls; the tokens they pass are opaque.
"""

from __future__ import annotations

import ctypes
import platform
import struct
import threading
from typing import Any

import numpy as np

__all__ = ["numpy_fast_path", "restore_numpy_global", "save_numpy_global"]

_MT_NBYTES = 624 * 4 + 4  # uint32 key[624]; int pos
_GAUSS_NBYTES = 16  # int has_gauss (+4 bytes of padding); double gauss
_PTR = struct.calcsize("P")


class _Layout:
    """Where the global ``RandomState``'s state lies, checked for one (RandomState, bit
    generator) pair; ``fast`` is False when it could not be checked."""

    def __init__(self, rs: Any, bg: Any) -> None:
        self.rs, self.bg = rs, bg
        self.mt_addr = self.gauss_addr = 0
        self.fast = False
        try:
            self.fast = self._find() and self._check()
        except Exception:  # noqa: BLE001 - any surprise means: use the public API
            self.fast = False

    def _find(self) -> bool:
        if platform.python_implementation() != "CPython" or type(self.bg) is not np.random.MT19937:
            return False  # id() is an address only in CPython; the key layout is MT19937's
        self.mt_addr = int(self.bg.ctypes.state_address)
        base, size = id(self.rs), type(self.rs).__basicsize__
        words = [struct.unpack_from("P", ctypes.string_at(base, size), off)[0]
                 for off in range(0, size - _PTR + 1, _PTR)]  # fmt: skip
        # the RandomState's bitgen_t copy starts with the state pointer; its aug_state starts
        # with a pointer to that copy, then has_gauss and gauss
        copies = [i * _PTR for i, w in enumerate(words) if w == self.mt_addr]
        augs = [i * _PTR for i, w in enumerate(words) if any(w == base + c for c in copies)]
        if len(augs) != 1 or augs[0] + _PTR + _GAUSS_NBYTES > size:
            return False
        self.gauss_addr = base + augs[0] + _PTR
        return True

    def _check(self) -> bool:
        """Known states written with the public API read back here byte for byte; a fast
        restore gives back what the public API reported. The caller's state is put back."""
        original: Any = np.random.get_state()  # the legacy tuple
        try:
            key = np.arange(7, 7 + 624, dtype=np.uint32) * np.uint32(2654435761)
            for pos, has_gauss, gauss in ((5, 1, 0.1234567890123), (623, 0, 0.0)):
                np.random.set_state(("MT19937", key, pos, has_gauss, gauss))
                want = key.tobytes() + struct.pack("i", pos)
                if ctypes.string_at(self.mt_addr, _MT_NBYTES) != want:
                    return False
                has, _pad, g = struct.unpack("i4sd", ctypes.string_at(self.gauss_addr, 16))
                if (has, g) != (has_gauss, gauss):
                    return False
            np.random.set_state(original)
            token = self.save()
            np.random.seed(12345)
            np.random.normal()  # leaves a Gaussian cached
            self.restore(token)
            now: Any = np.random.get_state()
            return bool(
                np.array_equal(now[1], original[1]) and now[0] == original[0]
                and now[2:] == original[2:]
            )  # fmt: skip
        finally:
            np.random.set_state(original)

    # Under the bit generator's lock, as numpy's own draws and set_state are: a draw in another
    # thread (numpy may run a large one without the GIL) never sees half a state.
    def save(self) -> tuple[bytes, bytes]:
        with self.bg.lock:
            return (ctypes.string_at(self.mt_addr, _MT_NBYTES),
                    ctypes.string_at(self.gauss_addr, _GAUSS_NBYTES))  # fmt: skip

    @staticmethod
    def public_state(token: tuple[bytes, bytes]) -> tuple[Any, ...]:
        """``token`` as ``np.random.get_state()`` gives it (the legacy tuple)."""
        mt, gauss = token
        (pos,) = struct.unpack("i", mt[-4:])
        has, _pad, g = struct.unpack("i4sd", gauss)
        return ("MT19937", np.frombuffer(mt[:-4], dtype=np.uint32).copy(), pos, has, g)

    def restore(self, token: tuple[bytes, bytes]) -> None:
        with self.bg.lock:
            ctypes.memmove(self.mt_addr, token[0], _MT_NBYTES)
            ctypes.memmove(self.gauss_addr, token[1], _GAUSS_NBYTES)


_layout: _Layout | None = None
_lock = threading.Lock()


def _current() -> _Layout:
    """The checked layout of the global RandomState as it is now (checked again after
    ``np.random.set_bit_generator`` or anything else that replaced it)."""
    global _layout
    rs = np.random.get_state.__self__  # type: ignore[attr-defined]  # the global RandomState
    bg = np.random.get_bit_generator()  # type: ignore[attr-defined]  # numpy >= 1.25
    layout = _layout
    if layout is None or layout.rs is not rs or layout.bg is not bg:
        with _lock:
            layout = _layout = _Layout(rs, bg)
    return layout


def numpy_fast_path() -> bool:
    """Whether numpy's global state is copied by memory (True) or through
    ``np.random.get_state``/``set_state`` (False: same results, ~70 us slower per batch).

    Example:
        >>> isinstance(numpy_fast_path(), bool)
        True
    """
    return _current().fast


def save_numpy_global() -> Any:
    """An opaque copy of numpy's global RNG state (key, position and the cached Gaussian):
    what :func:`restore_numpy_global` puts back. Same meaning as ``np.random.get_state()``.

    Example:
        >>> token = save_numpy_global()
        >>> a = np.random.normal(size=3)
        >>> restore_numpy_global(token)
        >>> bool((np.random.normal(size=3) == a).all())
        True
    """
    layout = _current()
    return (layout, layout.save()) if layout.fast else (None, np.random.get_state())


def restore_numpy_global(token: Any) -> None:
    """Put numpy's global RNG back to the state :func:`save_numpy_global` copied.

    Raises:
        ValueError: ``token`` was not made by :func:`save_numpy_global`.
    """
    try:
        layout, state = token
    except (TypeError, ValueError):
        raise ValueError(
            f"token={type(token).__name__}: pass what save_numpy_global() returned"
        ) from None
    if layout is None:
        np.random.set_state(state)
    elif layout is _current():
        layout.restore(state)
    else:  # the global bit generator was replaced in between: do what set_state would
        np.random.set_state(_Layout.public_state(state))
