"""Floor 6 of ``clorch_nb.data``: what happens to a batch after a worker built it.

The delivery stages (``delivery``), pinning (``pinning``), the copy to the device
(``device_feed``) and the one seam every CUDA call goes through (``cuda_seam``).

May import: every floor up to ``shards`` (``workers`` included); not its siblings ``epoch``
and ``mix``, nor ``loader`` or ``replay`` (``tests/unit/test_architecture.py`` pins the order).
"""
