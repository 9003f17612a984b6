"""What a fresh interpreter imports: the core imports (and loads a batch) without ipywidgets,
matplotlib, IPython or sklearn; the pure widget layers import without the notebook libraries;
``clorch_nb.data`` never imports ``clorch_nb.widgets``.

Each test starts a new Python (``sys.modules`` of this one already holds everything), so they
live here rather than beside the static checks in ``tests/unit/test_architecture.py`` and
``tests/unit/test_widgets_throughput.py``: the unit tier starts no process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_core_imports_and_loads_without_notebook_libraries() -> None:
    code = """
import sys
for name in ("ipywidgets", "matplotlib", "IPython", "sklearn"):
    sys.modules[name] = None  # any import of them fails
import torch
from clorch_nb import data, dist
ds = data.tensor_dataset(torch.arange(6.0).unsqueeze(1), torch.arange(6))
s = data.distributed_sampler(ds, num_replicas=2, rank=0, shuffle=False)
print([b["target"].tolist() for b in data.dataloader(ds, batch_size=2, sampler=s)])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[[0, 2], [4]]"


def test_pure_modules_import_without_ipywidgets_or_matplotlib() -> None:
    code = textwrap.dedent("""
        import sys
        for name in ("ipywidgets", "matplotlib", "IPython"):
            sys.modules[name] = None  # any import of them now fails
        import clorch_nb.widgets as w
        from clorch_nb.widgets import shards, shapes, throughput
        assert w.shard_table(10, 3).epochs[0].ok
        try:
            w.ShardView
        except ImportError:
            pass
        else:
            raise SystemExit("ShardView imported without ipywidgets?")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_data_never_imports_widgets() -> None:
    code = (
        "import sys, clorch_nb, clorch_nb.data; "
        "print([m for m in sys.modules if 'widgets' in m and m.startswith('clorch_nb')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
