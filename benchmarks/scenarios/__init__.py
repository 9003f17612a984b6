"""One module per scenario; each has ``TITLE`` and ``run(ctx) -> list[Row]``."""

from benchmarks.scenarios import (
    s1_tensors,
    s2_cpu_items,
    s3_gil_free,
    s4_large_batches,
    s5_startup,
    s6_memory,
    s7_instrumentation,
    s8_resume,
    s9_shards,
    s10_decode,
    s11_streams,
)

SCENARIOS = {
    1: s1_tensors,
    2: s2_cpu_items,
    3: s3_gil_free,
    4: s4_large_batches,
    5: s5_startup,
    6: s6_memory,
    7: s7_instrumentation,
    8: s8_resume,
    9: s9_shards,
    10: s10_decode,
    11: s11_streams,
}
