"""Floor 1 of ``clorch_nb.data``: what a dataset is and what it offers the loader.

The dataset kinds (``dataset``, ``defdataset``, ``TensorDataset``, torch adapters), their
optional hooks (``protocols``: ``get_batch``, ``set_epoch``, ``process_spec``, ...), how process
workers rebuild one (``process_spec``), collation, the thread-safety check, the worker info a
dataset reads, and the per-epoch hooks and watch (``epoch_hooks``).

May import: ``skipping``, ``state`` (the floor below) and nothing else of ``clorch_nb.data``
(``tests/unit/test_architecture.py`` pins the order).
"""
