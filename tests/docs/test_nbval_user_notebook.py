"""B30: a user's notebook with clorch_nb's views, warnings and a throughput monitor is executed
once (stored outputs), then re-validated by nbval in a fresh kernel with clorch_nb's shipped
sanitize file and no other setting (no conftest, stderr compared)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clorch_nb.nbval import sanitize_file

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("nbval")

CELLS = [
    "import torch\nfrom clorch_nb import data, widgets\n"
    "from clorch_nb.widgets.shapes_view import BatchShapesView",
    "widgets.ShardView.from_sampler(\n"
    "    data.distributed_sampler(10, num_replicas=3, rank=0, seed=0), epochs=2)",
    "ds = data.tensor_dataset(torch.arange(12.).unsqueeze(1), torch.arange(12))\n"
    "BatchShapesView(data.dataloader(ds, batch_size=5, shuffle=False))",
    "data.dataloader(ds, batch_size=4, shuffle=False)",
    "ragged = data.dataset(size=4, get_item=lambda i: {'x': torch.zeros(i + 1)})\n"
    "widgets.batch_shapes(data.dataloader(ragged, batch_size=2, shuffle=False))",
    "sampler = data.distributed_sampler(8, num_replicas=2, rank=0, seed=0)\n"
    "first = list(sampler)\n"
    "second = list(sampler)  # no set_epoch: clorch_nb warns (stderr)\n"
    "first == second",
    "loader = data.dataloader(ds, batch_size=4)\n"
    "for batch in widgets.monitor(loader):\n"
    "    pass\n"
    "len(batch['target'])",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_b30_user_notebook_revalidates_with_the_shipped_sanitize_file(tmp_path: Path) -> None:
    """B30: every cell of a user notebook re-validates under nbval (stderr compared too)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "user_nb.ipynb"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute(env=env)
    nbformat.write(nb, path)
    stderr = [o for c in nb.cells for o in c.outputs if o.get("name") == "stderr"]
    assert stderr and "UserWarning" in stderr[0]["text"]  # the warning is there to compare
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--nbval",
            "--nbval-current-env",
            "--nbval-sanitize-with",
            sanitize_file(),
            str(path),
            "-q",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"{len(CELLS)} passed" in proc.stdout
