"""clorch_nb: a Jupyter-first data-loading toolkit for PyTorch.

``from clorch_nb import data`` for datasets, the loader, sharding and collation;
``clorch_nb.dist`` for rank and world size; ``clorch_nb.widgets`` (extra ``widgets``) for the
notebook views.
"""

# first: before torch is imported (see warm_start.py). In IPython / Jupyter (or with
# CLORCH_NB_START_FORKSERVER=1) the workers' forkserver starts now, in the background, so its
# torch import runs beside this one and the first process loader finds it ready.
from clorch_nb import warm_start

warm_start.start_at_import()
from clorch_nb import data, dist, errors  # noqa: E402

__version__ = "0.1.0"
__all__ = ["__version__", "data", "dist", "errors"]
