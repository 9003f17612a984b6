"""Floor 7 of ``clorch_nb.data``: the ``DataLoader`` and its two fronts.

The loader (``loader``: ``DataLoader``, ``dataloader``, its engine), torch's argument names
(``torch_args``), the engine of a torch ``IterableDataset`` (``stream``) and the seed policy
(``seeds``).

May import: every floor below; only ``replay`` (and the package's face) may import it
(``tests/unit/test_architecture.py`` pins the order).
"""
