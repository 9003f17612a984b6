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
  interpreter, as a learner's kernel would);
* against the registry (marked ``registry``; skipped with the reason when PyPI does not answer a
  download within a few seconds): pip resolves ``torch==2.13.0`` with ``.[extra]``, one dry run
  per extra, with this environment's pip configuration (the one ``scripts/setup_env.sh``
  installs with), and the resolved set keeps torch 2.13.0 and holds no torchvision or litdata
  beside Lightning. This catches what the static checks cannot: a dependency of a dependency
  that asks for another torch or brings torchvision in. (Without a configured torch wheel, pip
  fetches torch's metadata from the index; where the index serves no separate metadata file that
  means downloading the wheels, so this machine's wheel folder keeps the run at ~80 s.)
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

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


# -- against the registry: what pip really resolves --------------------------------------------

#: seconds PyPI gets to answer a small download before the resolver checks skip
REGISTRY_TIMEOUT_S = 5
#: dry runs at once (each is mostly waiting for the index; 2 cores here)
PARALLEL_RESOLVES = 4


def _isolated_pip_env() -> dict[str, str]:
    """This environment without pip's configuration (files and PIP_* variables, a certificate
    bundle aside): the registry is PyPI, not a machine's local mirror or wheel folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@functools.cache
def _registry_unreachable() -> str | None:
    """Why PyPI cannot be used here (a sentence), or None when a small download succeeds."""
    with tempfile.TemporaryDirectory() as dest:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
            "--only-binary", ":all:", "--dest", dest, "--quiet",
            "--timeout", str(REGISTRY_TIMEOUT_S), "--retries", "0", "six==1.17.0",
        ]  # fmt: skip
        try:
            run = subprocess.run(
                cmd, capture_output=True, text=True, env=_isolated_pip_env(),
                timeout=4 * REGISTRY_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return f"pip download did not finish within {4 * REGISTRY_TIMEOUT_S} s"
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no message"])[-1]
        return f"pip download cannot reach the index within {REGISTRY_TIMEOUT_S} s: {last}"
    return None


def _resolve(extra: str) -> tuple[float, dict[str, str] | str]:
    """pip's dry run of ``torch==2.13.0`` with ``.[extra]`` in one call: its wall time and the
    resolved {name: version}, or pip's error (the last lines of its stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
            "--quiet", "--report", str(report), f"torch=={TORCH}", f".[{extra}]",
        ]  # fmt: skip
        t0 = time.perf_counter()
        run = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=600
        )  # this environment's pip configuration, as scripts/setup_env.sh installs with it
        took = time.perf_counter() - t0
        if run.returncode != 0:
            return took, "\n".join(run.stderr.strip().splitlines()[-8:])
        installs = json.loads(report.read_text())["install"]
    return took, {_norm(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


@pytest.fixture(scope="module")
def resolved() -> dict[str, tuple[float, dict[str, str] | str]]:
    """Every extra resolved against PyPI, a few at once (the slowest, dev, takes ~40 s)."""
    reason = _registry_unreachable()
    if reason is not None:
        pytest.skip(f"the registry checks need PyPI: {reason}")
    with ThreadPoolExecutor(PARALLEL_RESOLVES) as pool:
        return dict(zip(sorted(EXTRAS), pool.map(_resolve, sorted(EXTRAS)), strict=True))


@pytest.mark.registry
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_extra_resolves_beside_cpu_torch(
    extra: str, resolved: dict[str, tuple[float, dict[str, str] | str]]
) -> None:
    took, got = resolved[extra]
    assert not isinstance(got, str), (
        f"[{extra}] does not install beside torch=={TORCH} ({took:.0f} s): pip says\n{got}"
    )
    assert Version(got["torch"]).base_version == TORCH, (
        f"[{extra}] resolves torch {got['torch']}: it would replace the CPU torch {TORCH}"
    )
    bad, importers = set(got) & NO_LOAD_BESIDE_CPU_TORCH, set(got) & IMPORT_TORCHVISION
    assert not (bad and importers), (
        f"[{extra}] resolves {sorted(bad)} beside {sorted(importers)}: torchvision does not load "
        f"beside the CPU torch {TORCH}, and then `import lightning` fails"
    )
    if extra in {"dev", "bench", "test", "frameworks"}:
        assert not bad, f"[{extra}] resolves {sorted(bad)}: keep torchvision out of it"
    if "torchvision" in got:
        assert got["torchvision"] == "0.28.0", (
            f"[{extra}] resolves torchvision {got['torchvision']}"
        )
