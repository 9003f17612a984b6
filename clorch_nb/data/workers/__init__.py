"""Worker backends: one pool interface (:class:`~clorch_nb.data.workers.base.WorkerPool`),
implemented by threads (``thread.py``) and processes (``process.py``); ``num_workers=0`` builds
batches inline in the loader."""
