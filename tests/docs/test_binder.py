"""binder/ is consistent with pyproject.toml, scripts/setup_env.sh and the README badge.

Docker is not available here, so the image is never built; these tests check what repo2docker
would read (see jupyterhub/repo2docker, buildpacks/python): ``runtime.txt`` picks the Python
(default 3.10 without it), ``requirements.txt`` is pip-installed into the kernel env from the
repository root (a local line such as ``.[notebooks]`` defers that until the repository is
copied in), and ``start`` runs at every launch and must ``exec "$@"``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BADGE_TARGET = "urlpath=lab/tree/notebooks/00_index.ipynb"
# What repo2docker's base environment already provides (buildpacks/conda/environment.yml):
# our requirements must allow these majors, or pip would swap out the server's own JupyterLab.
BASE_ENV_MAJORS = {"jupyterlab": 4, "notebook": 7, "ipywidgets": 8}
LOCAL_LINE = re.compile(r"^(?:-e\s+|--editable[= ]\s*)?\.(?:\[(?P<extras>[^\]]*)\])?$")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def project_name() -> str:
    return canonicalize_name(pyproject()["project"]["name"])


def binder_python() -> Version:
    text = (BINDER / "runtime.txt").read_text().strip()
    m = re.fullmatch(r"python-(\d+)\.(\d+)", text)
    assert m, f"binder/runtime.txt is {text!r}; repo2docker wants 'python-X.Y' (e.g. python-3.11)"
    return Version(f"{m[1]}.{m[2]}")


def requirement_lines() -> list[str]:
    """binder/requirements.txt without comments and blank lines."""
    text = (BINDER / "requirements.txt").read_text()
    lines = [ln.split(" #", 1)[0].strip() for ln in text.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def binder_install() -> tuple[list[Requirement], set[str], list[str]]:
    """(named requirements, extras of the local package line, pip option lines)."""
    named: list[Requirement] = []
    local_extras: set[str] | None = None
    options: list[str] = []
    for line in requirement_lines():
        m = LOCAL_LINE.match(line)
        if m:
            assert local_extras is None, "binder/requirements.txt installs the package twice"
            local_extras = {e.strip() for e in (m["extras"] or "").split(",") if e.strip()}
        elif line.startswith("-"):
            options.append(line)
        else:
            named.append(Requirement(line))
    assert local_extras is not None, (
        "binder/requirements.txt has no local line ('.' or '.[notebooks]'): with a binder/ folder "
        "repo2docker does not install pyproject.toml's package by itself"
    )
    return named, local_extras, options


def expand(extras: set[str], python: Version) -> list[Requirement]:
    """The package's requirements (core + ``extras``), following ``clorch-nb[...]`` references,
    keeping those whose markers hold on ``python``."""
    project = pyproject()["project"]
    optional = project.get("optional-dependencies", {})
    env = {k: str(v) for k, v in default_environment().items()} | {
        "python_version": f"{python.major}.{python.minor}",
        "python_full_version": f"{python.major}.{python.minor}.0",
        "extra": "",
    }
    out: list[Requirement] = []
    seen: set[str] = set()
    todo = [Requirement(r) for r in project["dependencies"]]
    todo += [Requirement(f"{project['name']}[{e}]") for e in sorted(extras)]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if canonicalize_name(req.name) == project_name():
            for e in sorted(req.extras - seen):
                assert e in optional, f"pyproject.toml refers to an unknown extra {e!r}"
                seen.add(e)
                todo += [Requirement(r) for r in optional[e]]
            continue
        out.append(req)
    return out


def test_runtime_python_satisfies_requires_python() -> None:
    python = binder_python()
    requires = pyproject()["project"]["requires-python"]
    assert python in SpecifierSet(requires), f"binder python {python} vs requires-python {requires}"


def test_torch_is_the_cpu_build_pinned_like_setup_env() -> None:
    named, _, options = binder_install()
    torches = [r for r in named if canonicalize_name(r.name) == "torch"]
    assert len(torches) == 1, "binder/requirements.txt must name torch exactly once"
    specs = list(torches[0].specifier)
    assert len(specs) == 1 and specs[0].operator == "==", f"pin torch exactly, got {torches[0]}"
    pinned = Version(specs[0].version)
    assert pinned.local == "cpu", f"{torches[0]}: use the +cpu build (plain torch pulls CUDA)"
    assert any(CPU_INDEX in opt for opt in options if opt.startswith("--extra-index-url")), (
        f"+cpu wheels live only on {CPU_INDEX}; add --extra-index-url {CPU_INDEX}"
    )
    m = re.search(r"pip install\b[^\n]*\btorch==(\S+)", (ROOT / "scripts/setup_env.sh").read_text())
    assert m, "scripts/setup_env.sh no longer pins torch; update this test"
    assert pinned.public == Version(m[1]).public, (
        f"binder pins torch {pinned}, scripts/setup_env.sh installs {m[1]}: keep them equal"
    )


def test_local_package_line_brings_the_notebook_extras() -> None:
    _, extras, _ = binder_install()
    assert "notebooks" in extras, f"install '.[notebooks]' (got extras {sorted(extras)})"
    assert "notebooks" in pyproject()["project"]["optional-dependencies"]


def test_every_core_and_notebook_dependency_is_satisfiable() -> None:
    """Each requirement of the package (core + notebooks) is installed by binder: by an explicit
    pin that satisfies it, or else by pip resolving the local line's extras (then it must not
    contradict what the base image ships)."""
    python = binder_python()
    named, extras, _ = binder_install()
    pins = {
        canonicalize_name(r.name): Version(next(iter(r.specifier)).version)
        for r in named
        if len(r.specifier) == 1 and next(iter(r.specifier)).operator == "=="
    }
    wanted = expand({"notebooks"}, python)
    assert {canonicalize_name(r.name) for r in wanted} >= {"torch", "jupyterlab", "ipywidgets"}
    installed = {canonicalize_name(r.name) for r in expand(extras, python)}
    installed |= {canonicalize_name(r.name) for r in named}
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in installed, f"{req} (core/notebooks) is not installed by binder/"
        if name in pins:
            assert req.specifier.contains(pins[name], prereleases=True), (
                f"binder pins {name}=={pins[name]} but the package needs {req}"
            )
        if name in BASE_ENV_MAJORS:
            major = BASE_ENV_MAJORS[name]
            assert any(
                req.specifier.contains(Version(f"{major}.{minor}"), prereleases=False)
                for minor in range(100)
            ), f"{req} excludes every {name} {major}.x that Binder's base image ships"


def test_start_is_executable_sets_one_thread_and_execs_the_command() -> None:
    start = BINDER / "start"
    assert os.access(start, os.X_OK), "binder/start must be executable (chmod +x)"
    text = start.read_text()
    assert text.startswith("#!"), "binder/start needs a shebang line"
    body = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert body[-1] == 'exec "$@"', 'binder/start must end with exec "$@" (or Jupyter never starts)'
    # run it as repo2docker does: start <the server command>
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    show = "import os, sys; print(os.environ['OMP_NUM_THREADS'], sys.argv[1:])"
    out = subprocess.run(
        [str(start), sys.executable, "-c", show, "a b"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=True,
    )
    assert out.stdout.strip() == "1 ['a b']"


def test_post_build_if_present_stops_on_errors() -> None:
    post = BINDER / "postBuild"
    if not post.exists():
        pytest.skip("no binder/postBuild (none needed)")
    assert os.access(post, os.X_OK)
    first = [ln for ln in post.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert first and first[0].strip().startswith("set -e"), "postBuild must start with set -e"


def test_only_one_binder_folder() -> None:
    assert not (ROOT / ".binder").exists(), "repo2docker refuses both binder/ and .binder/"
    assert not (BINDER / "environment.yml").exists(), "environment.yml makes runtime.txt ignored"


def _binder_url_module():
    spec = importlib.util.spec_from_file_location("binder_url", ROOT / "scripts" / "binder_url.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_badge_explains_how_to_launch_from_a_copy() -> None:
    # The project has no public repository of its own: a badge must not open someone else's.
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# "), "README starts with its title"
    badge = next(ln for ln in lines[1:] if ln.strip())
    m = re.fullmatch(
        r"\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]\(#([\w-]+)\)", badge.strip()
    )
    assert m, f"the line below the README title should be the Binder badge, got {badge!r}"
    headings = {
        re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-"): h
        for h in re.findall(r"^#+ (.+)$", text, re.M)
    }
    assert m[1] in headings, f"the badge points at #{m[1]}, which is not a README heading"
    section = text.split(headings[m[1]], 1)[1].split("\n#", 1)[0]
    assert f"https://mybinder.org/v2/gh/<user>/<repository>/HEAD?{BADGE_TARGET}" in section
    assert "scripts/binder_url.py" in section
    # the two commands stay the README's first commands
    first_block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first_block is not None
    assert re.findall(r"^bash (\S+)", first_block[1], re.M) == ["scripts/lab.sh", "scripts/test.sh"]


def test_no_binder_link_names_a_repository() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "notebooks").glob("*.ipynb"))]
    for path in files:
        for owner_repo in re.findall(r"mybinder\.org/v2/gh/([^/\s]+/[^/\s]+)/", path.read_text()):
            assert owner_repo == "<user>/<repository>", (
                f"{path.name} links Binder to {owner_repo}, which is not this project's repository"
            )


@pytest.mark.parametrize(
    ("remote", "owner_repo"),
    [
        ("you/clorch_nb", "you/clorch_nb"),
        ("https://github.com/you/clorch_nb.git", "you/clorch_nb"),
        ("https://github.com/you/clorch_nb", "you/clorch_nb"),
        ("git@github.com:some-org/clorch.nb.git", "some-org/clorch.nb"),
    ],
)
def test_binder_url_from_a_github_remote(remote: str, owner_repo: str) -> None:
    url = _binder_url_module().binder_url(remote)
    assert url == f"https://mybinder.org/v2/gh/{owner_repo}/HEAD?{BADGE_TARGET}"


def test_binder_url_refuses_what_binder_cannot_build() -> None:
    with pytest.raises(ValueError, match="not a GitHub repository"):
        _binder_url_module().binder_url("https://gitlab.com/you/clorch_nb.git")


def test_badge_target_notebook_exists() -> None:
    notebooks = ROOT / "notebooks"
    if not any(notebooks.glob("*.ipynb")):
        pytest.skip("the notebook series is not written yet")
    target = ROOT / BADGE_TARGET.removeprefix("urlpath=lab/tree/")
    assert target.is_file(), f"the Binder badge opens {target.relative_to(ROOT)}, which is missing"
