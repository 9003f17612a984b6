"""Issue 31 from a real Jupyter kernel (jupyter_client): classes defined in notebook cells run
in process workers. A cell-defined map-style dataset, one with a lambda attribute, and a
cell-defined ``IterableDataset`` split with ``get_worker_info()`` give, in 2 process workers,
the exact batches of inline (map-style) and of torch's forked DataLoader (iterable); a cell's
dataset holding a 256 MiB tensor adds well under 64 MiB of worker memory (shared, not copied;
measured with psutil); an open-file attribute is refused by name with no child process left."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kernel_cells import run_cell

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Replaces the suite's leak check: the kernel keeps its forkserver between tests; what a
    cell leaves is checked in the kernel itself, and the kernel is shut down at the end."""
    yield


@pytest.fixture(scope="module")
def kernel(jupyter_kernel: tuple[Any, Any]) -> Any:
    """The module's kernel, with json, psutil, torch and ``data`` imported."""
    _, kc = jupyter_kernel
    out = run_cell(kc, "import json, psutil, torch\nfrom clorch_nb import data\n", 120)
    assert out["error"] is None, out
    return kc


def _json(kc: Any, code: str, timeout_s: float = 180) -> Any:
    out = run_cell(kc, code, timeout_s)
    assert out["error"] is None, out
    return json.loads(out["stdout"].strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_a_cell_map_dataset_and_one_with_a_lambda_give_inline_batches(kernel: Any) -> None:
    got = _json(
        kernel,
        "class CellSquares(torch.utils.data.Dataset):\n"
        "    def __init__(self, n):\n"
        "        self.n, self.scale = n, torch.arange(100_000.0)  # 400 KB: shared\n"
        "    def __len__(self):\n"
        "        return self.n\n"
        "    def __getitem__(self, i):\n"
        "        return i * i + self.scale[i].item()\n"
        "\n"
        "class WithLambda(torch.utils.data.Dataset):\n"
        "    def __init__(self):\n"
        "        self.f = lambda i: [i, i + 100]\n"
        "    def __len__(self):\n"
        "        return 9\n"
        "    def __getitem__(self, i):\n"
        "        return torch.tensor(self.f(i))\n"
        "\n"
        "res = {}\n"
        "for name, ds in [('squares', CellSquares(11)), ('lambda', WithLambda())]:\n"
        "    inline = [b.tolist() for b in data.DataLoader(ds, batch_size=4)]\n"
        "    with data.DataLoader(ds, batch_size=4, num_workers=2) as loader:\n"
        "        res[name] = {'backend': loader.worker_backend, 'inline': inline,\n"
        "                     'process': [b.tolist() for b in loader]}\n"
        "print(json.dumps(res))\n",
    )
    for name in ("squares", "lambda"):
        assert got[name]["backend"] == "process"
        assert got[name]["process"] == got[name]["inline"]
    assert got["squares"]["inline"][0] == [0.0, 2.0, 6.0, 12.0]
    assert got["lambda"]["inline"][0] == [[0, 100], [1, 101], [2, 102], [3, 103]]


@pytest.mark.timeout(300)
def test_a_cell_iterable_split_by_get_worker_info_gives_torch_s_forked_batches(
    kernel: Any,
) -> None:
    got = _json(
        kernel,
        "import math\n"
        "class RangeStream(torch.utils.data.IterableDataset):\n"
        "    def __init__(self, start, end):\n"
        "        self.start, self.end = start, end\n"
        "    def __iter__(self):\n"
        "        info = torch.utils.data.get_worker_info()\n"
        "        per = int(math.ceil((self.end - self.start) / info.num_workers))\n"
        "        lo = self.start + info.id * per\n"
        "        return iter(range(lo, min(lo + per, self.end)))\n"
        "\n"
        "ds = RangeStream(3, 20)\n"
        "ours = data.DataLoader(ds, batch_size=3, num_workers=2)\n"
        "theirs = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2,\n"
        "                                     multiprocessing_context='fork')\n"
        "print(json.dumps({'backend': ours.worker_backend,\n"
        "                  'ours': [[b.tolist() for b in ours] for _ in range(2)],\n"
        "                  'torch': [b.tolist() for b in theirs]}))\n",
    )
    assert got["backend"] == "process"
    assert got["ours"] == [got["torch"], got["torch"]]
    assert sorted(x for b in got["torch"] for x in b) == list(range(3, 20))


@pytest.mark.timeout(420)
def test_a_256_mib_tensor_is_shared_not_copied_into_the_workers(kernel: Any) -> None:
    got = _json(
        kernel,
        "class Holds(torch.utils.data.Dataset):\n"
        "    def __init__(self, mib):\n"
        "        self.x = torch.ones(mib * 2**18)  # float32\n"
        "    def __len__(self):\n"
        "        return 64\n"
        "    def __getitem__(self, i):\n"
        "        return self.x[i * 1000 : (i + 1) * 1000].sum()\n"
        "\n"
        "def worker_uss(mib):\n"
        "    with data.DataLoader(Holds(mib), batch_size=8, num_workers=2,\n"
        "                         persistent_workers=True) as loader:\n"
        "        sums = [b.tolist() for b in loader]\n"
        "        pids = loader.worker_pids()\n"
        "        uss = sum(psutil.Process(p).memory_full_info().uss for p in pids)\n"
        "    return sums, len(pids), uss\n"
        "\n"
        "small = worker_uss(1)\n"
        "big = worker_uss(256)\n"
        "print(json.dumps({'small': small, 'big': big}))\n",
        timeout_s=360,
    )
    (sums_small, n_small, uss_small), (sums_big, n_big, uss_big) = got["small"], got["big"]
    assert n_small == n_big == 2
    assert sums_big == sums_small == [[1000.0] * 8] * 8
    assert uss_big - uss_small < 64 * 2**20, (uss_small, uss_big)  # 256 MiB not copied


@pytest.mark.timeout(300)
def test_an_open_file_attribute_is_refused_by_name_and_starts_no_process(kernel: Any) -> None:
    got = _json(
        kernel,
        "class Reads(torch.utils.data.Dataset):\n"
        "    def __init__(self, path):\n"
        "        self.fh = open(path, 'rb')\n"
        "    def __len__(self):\n"
        "        return 4\n"
        "    def __getitem__(self, i):\n"
        "        self.fh.seek(i)\n"
        "        return self.fh.read(1)\n"
        "\n"
        "before = {p.pid for p in psutil.Process().children(recursive=True)}\n"
        "ds = Reads('README.md')\n"
        "try:\n"
        "    data.DataLoader(ds, num_workers=2)\n"
        "    err = None\n"
        "except ValueError as e:\n"
        "    err = [type(e).__name__, str(e)]\n"
        "ds.fh.close()\n"
        "after = {p.pid for p in psutil.Process().children(recursive=True)}\n"
        "print(json.dumps({'err': err, 'new': sorted(after - before)}))\n",
    )
    assert got["err"][0] == "NotShippableError"
    assert got["err"][1].startswith(
        "cannot send this dataset to process workers: dataset.fh: an open file (BufferedReader "
        "'README.md')"
    )
    assert "open it lazily in __getitem__" in got["err"][1]
    assert got["new"] == []  # no child process was started, none is left
