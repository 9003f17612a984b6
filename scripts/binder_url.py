"""Print the Binder link that opens this tutorial series from a GitHub copy of the repository.

Binder (mybinder.org) builds an image from a public Git repository. This project has no public
home of its own, so the link is made from your copy: by default from the ``origin`` remote of the
repository this script lives in.

Usage:
    python scripts/binder_url.py                       # from `git remote get-url origin`
    python scripts/binder_url.py https://github.com/you/clorch_nb.git
    python scripts/binder_url.py you/clorch_nb --ref main
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = "urlpath=lab/tree/notebooks/00_index.ipynb"
_GITHUB = re.compile(
    r"^(?:https?://github\.com/|git@github\.com:|ssh://git@github\.com/)?"
    r"(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)/(?P<repo>[A-Za-z0-9._-]+?)(?:\.git)?/?$"
)


def binder_url(remote: str, *, ref: str = "HEAD") -> str:
    """The mybinder.org link for a GitHub repository, opening ``notebooks/00_index.ipynb``.

    Args:
        remote (str): ``owner/repo``, an https URL or an ssh remote of a GitHub repository.
        ref (str): branch, tag or commit to build (``HEAD``: the default branch).

    Returns:
        str: the link.

    Raises:
        ValueError: ``remote`` is not a GitHub repository (Binder's ``gh`` provider needs one).

    Example:
        >>> binder_url("git@github.com:you/clorch_nb.git")
        'https://mybinder.org/v2/gh/you/clorch_nb/HEAD?urlpath=lab/tree/notebooks/00_index.ipynb'
    """
    m = _GITHUB.match(remote.strip())
    if m is None:
        raise ValueError(
            f"remote={remote!r} is not a GitHub repository (owner/repo, https://github.com/... or "
            "git@github.com:...); push your copy to GitHub, or build it with repo2docker locally"
        )
    return f"https://mybinder.org/v2/gh/{m['owner']}/{m['repo']}/{ref}?{TARGET}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("remote", nargs="?", help="default: this repository's origin remote")
    parser.add_argument("--ref", default="HEAD", help="branch, tag or commit (default HEAD)")
    args = parser.parse_args(argv)
    remote = args.remote
    if remote is None:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            print(
                "this repository has no 'origin' remote: push it to GitHub and pass "
                "owner/repo, e.g. python scripts/binder_url.py you/clorch_nb",
                file=sys.stderr,
            )
            return 2
        remote = out.stdout.strip()
    try:
        print(binder_url(remote, ref=args.ref))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
