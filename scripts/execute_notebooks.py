"""Regenerate the stored outputs of the tutorial series: one scripted execution per notebook.

Usage:
    .venv/bin/python scripts/execute_notebooks.py               # every notebooks/NN_*.ipynb
    .venv/bin/python scripts/execute_notebooks.py notebooks/04_workers.ipynb

Each notebook runs top to bottom in a fresh ``python3`` kernel of this environment, in the
notebooks/ folder (as nbval and JupyterLab run it), with the same environment variables as
``scripts/test.sh`` (PYTHONHASHSEED=0, OMP_NUM_THREADS=1), so the stored outputs are the ones nbval
compares against. Widget state is saved into the notebook metadata (``store_widget_state``), so
GitHub and nbconvert render the views. The notebook is written back in place only if every cell
ran without error; each notebook's wall time is printed (and the table at the end).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def execute(path: Path, *, timeout: int, draft_dir: Path | None = None) -> float:
    """Run ``path`` in place; return its wall time in seconds. Raises on a failing cell.

    With ``draft_dir``, errors are allowed and the result is written there instead (drafting).
    """
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.pop("widgets", None)  # stale state from an earlier run; rebuilt below
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,
        allow_errors=draft_dir is not None,
    )
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    nb.metadata["language_info"] = {"name": "python"}  # no patch version churn in diffs
    nbformat.validate(nb)
    nbformat.write(nb, path if draft_dir is None else draft_dir / path.name)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/NN_*.ipynb")
    parser.add_argument("--timeout", type=int, default=300, help="per-cell timeout, seconds")
    parser.add_argument(
        "--draft",
        type=Path,
        default=None,
        metavar="DIR",
        help="allow errors and write the executed notebooks to DIR, not in place",
    )
    args = parser.parse_args(argv)
    if args.draft is not None:
        args.draft.mkdir(parents=True, exist_ok=True)
    paths = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    times: dict[str, float] = {}
    failed = []
    for path in paths:
        print(f"executing {path.name} ...", flush=True)
        try:
            times[path.name] = execute(path, timeout=args.timeout, draft_dir=args.draft)
        except CellExecutionError as exc:
            failed.append(path.name)
            print(f"FAILED {path.name} (not written):\n{exc}", file=sys.stderr, flush=True)
            continue
        print(f"  {path.name}: {times[path.name]:.1f} s", flush=True)
    print("\nnotebook                               seconds")
    for name, s in times.items():
        print(f"{name:38} {s:7.1f}")
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
