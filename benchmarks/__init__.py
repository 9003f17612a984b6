"""Benchmarks of clorch_nb against ``torch.utils.data`` (and torchdata), side by side in one run.

Run ``.venv/bin/python -m benchmarks`` (``--quick`` for a smoke-sized run, ``--repeats N``,
``--only 1,7``, ``--output PATH``); it prints the table and writes ``benchmarks/RESULTS.md``.
"""
