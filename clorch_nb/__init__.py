"""clorch_nb: a Jupyter-first data-loading toolkit for PyTorch.

``from clorch_nb import data`` for datasets, the loader, sharding and collation;
``clorch_nb.dist`` for rank and world size; ``clorch_nb.widgets`` (extra ``widgets``) for the
notebook views.
"""

from clorch_nb import _forkserver_signals  # noqa: F401, I001 - first: before torch is imported
from clorch_nb import data, dist, errors

__version__ = "0.1.0"
__all__ = ["__version__", "data", "dist", "errors"]
