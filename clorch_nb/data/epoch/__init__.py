"""Floor 6 of ``clorch_nb.data``: one ``iter(loader)``.

``Epoch`` delivers an epoch's planned batches from a worker pool, in either order, with the
failure and warning policy (``epoch``); ``EpochIterator`` is what the user holds
(``epoch_iter``); ``timeouts`` words the waits.

May import: every floor up to ``shards`` (``workers`` included); not its siblings ``delivery``
and ``mix``, nor ``loader`` or ``replay`` (``tests/unit/test_architecture.py`` pins the order).
"""
