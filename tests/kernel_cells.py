"""Cells run in a real Jupyter kernel (jupyter_client), as a notebook runs them: the one helper
the kernel tests share (``tests/system/test_by_value_kernel.py``, ``test_launch_kernel.py``);
their ``jupyter_kernel`` fixture is in ``tests/system/conftest.py``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager, start_new_kernel

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def started_kernel() -> Iterator[tuple[KernelManager, Any]]:
    """A python3 kernel started in the repository root, as ``(manager, client)``; shut down
    (now) on exit."""
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(REPO))
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run_cell(
    kc: Any, code: str, timeout_s: float, on_output: Callable[[str], Any] | None = None
) -> dict[str, Any]:
    """Execute ``code`` as a cell and wait until the kernel is idle again.

    Returns:
        dict: ``"stdout"`` (all of it), ``"error"`` (``(ename, evalue, traceback)`` or None),
        ``"data"`` (each display's or result's mime bundle, in order) and ``"messages"``
        (every iopub message of the cell as ``(msg_type, content)``, in order: a live widget's
        updates are its ``comm_msg`` messages).

    Raises:
        TimeoutError: the cell did not finish in ``timeout_s``, with the output so far.

    ``on_output(text)`` sees the stdout so far each time more arrives.
    """
    msg_id = kc.execute(code)
    out: dict[str, Any] = {"stdout": "", "error": None, "data": [], "messages": []}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        out["messages"].append((kind, content))
        if kind == "stream":
            out["stdout"] += content["text"]
            if on_output is not None:
                on_output(out["stdout"])
        elif kind == "error":
            out["error"] = (content["ename"], content["evalue"], "\n".join(content["traceback"]))
        elif kind in ("display_data", "update_display_data", "execute_result"):
            out["data"].append(content["data"])
        elif kind == "status" and content["execution_state"] == "idle":
            return out
    raise TimeoutError(f"the cell did not finish in {timeout_s} s; output so far: {out}")
