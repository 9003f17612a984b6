"""Every extra in pyproject.toml installs a working environment beside the CPU torch 2.13.

What broke before (tutorial review, round 5, E1): the ``bench`` extra pinned ``torchvision``,
whose PyPI build does not load beside the CPU torch ("operator torchvision::nms does not
exist"); ``dev`` (test + bench) installed it beside Lightning, and ``import lightning`` failed
(torchmetrics imports torchvision), so notebook 19 and the framework tests broke.

The checks read the extras, with the self-references (``clorch-nb[...]``) expanded:

* no extra asks for a torch that 2.13.0 does not satisfy (pip would replace the CPU build);
* torchvision (and litdata, which requires it) only in an extra without the frameworks;
* ``dev`` and ``bench`` hold no torchvision at all;
* for every extra whose packages are installed here, its key modules import (in a fresh
  interpreter, as a learner's kernel would).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
TORCH = "2.13.0"
#: packages whose PyPI build does not load beside the CPU torch 2.13, or that require one
NO_LOAD_BESIDE_CPU_TORCH = {"torchvision", "litdata"}
#: packages that import torchvision when it is installed (and then fail if it does not load)
IMPORT_TORCHVISION = {"lightning", "torchmetrics", "pytorch-lightning"}
#: what each extra is for: modules that must import where the extra is installed
KEY_IMPORTS = {
    "widgets": ["ipywidgets", "matplotlib", "psutil"],
    "examples": ["sklearn", "PIL"],
    "remote": ["fsspec", "s3fs", "pyarrow"],
    "notebooks": ["jupyterlab", "notebook", "ipykernel", "tqdm"],
    "frameworks": ["lightning", "accelerate"],
    "tensorboard": ["tensorboard", "torch.utils.tensorboard"],
    "test": ["pytest", "nbval", "hypothesis", "lightning"],
    "s3local": ["moto", "boto3"],
    "bench": ["torchdata", "webdataset", "datasets"],
    "bench-litdata": ["litdata"],
    "dev": ["pytest", "lightning", "torchdata"],
}
SELF = re.compile(r"^clorch-nb\[([^\]]+)\]$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(extra: str) -> list[Requirement]:
    """The requirements of ``extra``, its ``clorch-nb[...]`` references expanded."""
    out: list[Requirement] = []
    for spec in EXTRAS[extra]:
        m = SELF.match(spec.replace(" ", ""))
        if m:
            for sub in m.group(1).split(","):
                out += closure(sub)
        else:
            out.append(Requirement(spec))
    return out


def _names(extra: str) -> set[str]:
    return {_norm(r.name) for r in closure(extra)}


def test_every_extra_named_here() -> None:
    assert set(KEY_IMPORTS) == set(EXTRAS), "name the key imports of every extra in KEY_IMPORTS"


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_no_other_torch(extra: str) -> None:
    for req in closure(extra):
        if _norm(req.name) == "torch":
            assert req.specifier.contains(TORCH), (
                f"[{extra}] asks for {req}: pip would replace the CPU torch {TORCH}"
            )


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_torchvision_never_beside_the_frameworks(extra: str) -> None:
    names = _names(extra)
    bad, importers = names & NO_LOAD_BESIDE_CPU_TORCH, names & IMPORT_TORCHVISION
    assert not (bad and importers), (
        f"[{extra}] installs {sorted(bad)} beside {sorted(importers)}: PyPI's torchvision does not "
        f"load beside the CPU torch {TORCH}, and then `import lightning` fails"
    )
    if "torchvision" in names:  # pinned to the release made for torch 2.13, never the newest
        (req,) = [r for r in closure(extra) if _norm(r.name) == "torchvision"]
        assert str(req.specifier) == "==0.28.0", f"[{extra}] {req}: pin torchvision==0.28.0"


@pytest.mark.parametrize("extra", ["dev", "bench", "test", "frameworks"])
def test_dev_and_bench_hold_no_torchvision(extra: str) -> None:
    assert not _names(extra) & NO_LOAD_BESIDE_CPU_TORCH


def _installed(extra: str) -> bool:
    for req in closure(extra):
        try:
            if not req.specifier.contains(metadata.version(req.name), prereleases=True):
                return False
        except metadata.PackageNotFoundError:
            return False
    return True


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_key_imports_where_installed(extra: str) -> None:
    if not _installed(extra):
        pytest.skip(f"[{extra}] is not installed in this environment")
    code = "; ".join(f"import {m}" for m in KEY_IMPORTS[extra])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=280)
    last = (run.stderr.strip().splitlines() or [""])[-1]
    assert run.returncode == 0, f"[{extra}] is installed but `{code}` fails: {last}"
