"""nbval support: the sanitize file clorch_nb ships for users' notebooks (B30).

``python -m clorch_nb.nbval`` prints its path, for
``pytest --nbval --nbval-sanitize-with "$(python -m clorch_nb.nbval)" notebook.ipynb``.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["sanitize_file"]


def sanitize_file() -> str:
    """The path of ``sanitize.cfg``: regexes for what is volatile in a notebook using clorch_nb
    (kernel cell-file paths in warnings, pids, addresses, the monitor's and timeline's timings).

    Example:
        >>> sanitize_file().endswith("sanitize.cfg")
        True
    """
    return str(resources.files(__name__) / "sanitize.cfg")
