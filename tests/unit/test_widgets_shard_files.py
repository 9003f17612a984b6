"""The file-shard view's pure layer: spans by shard from the loader's own work plan, its check
line, and the view's static forms (text, PNG) without a kernel."""

from __future__ import annotations

from clorch_nb.data.shards import WorkSettings, plan_epoch
from clorch_nb.data.shards.work_plan import remaining_stream
from clorch_nb.widgets.shard_files import shard_files


def test_spans_name_each_reader_and_padding() -> None:
    plan = plan_epoch([5, 0, 2], WorkSettings(num_replicas=2, num_workers=2, batch_size=2,
                                              shuffle=False))  # fmt: skip
    table = shard_files(plan, ["s3://b/a.tar", "b.tar", "c.tar"])
    assert table.to_text().splitlines() == [
        "Shard files -> (rank, worker), epoch 0: 3 shards, 2 ranks x 2 workers",
        # 7 items, 2 ranks: 4 each, the 8th a padding repeat of the stream's head (a.tar 0);
        # batch 2, 2 workers: each worker one batch of its rank's contiguous share
        "  a.tar (5): 0..1 r0w0, 2..3 r0w1, 4..4 r1w0, 0..0 r1w1 (pad)",
        "  b.tar (0): empty",
        "  c.tar (2): 0..0 r1w0, 1..1 r1w1",
        "epoch 0: 7 of 7 items read once; 1 padding repeat",
    ]
    assert [len(plan.batches(r)) for r in range(2)] == [2, 2]  # the same plan the loader runs


def test_a_resumed_plan_counts_the_items_of_cut_blocks_exactly() -> None:
    s = WorkSettings(num_replicas=2, num_workers=2, batch_size=3, seed=4, block_items=5)
    plan = plan_epoch([17, 9], s)
    rest = plan_epoch([17, 9], WorkSettings(**{**s.__dict__, "num_replicas": 3}),
                      remaining_stream(plan, 2))  # fmt: skip
    table = shard_files(rest, ["a", "b"])
    once, twice = table.coverage()
    left = sum(len(r) for r in remaining_stream(plan, 2))
    assert (once, twice) == (left, 0)
    assert any(sp.items is not None for sp in table.spans)  # a block cut by the resume


def test_the_view_draws_and_says_the_same(tmp_path) -> None:
    from clorch_nb import data
    from clorch_nb.widgets.shard_files_view import ShardFilesView

    (tmp_path / "a.jsonl").write_text("".join(f"{i}\n" for i in range(9)))
    ds = data.shard_dataset(str(tmp_path / "a.jsonl"), cache_dir=tmp_path, progress=False)
    sampler = data.distributed_sampler(ds, num_replicas=3, rank=0, shuffle=False)
    with ShardFilesView(sampler) as view:
        assert view.to_text().splitlines()[1] == "  a.jsonl (9): 0..2 r0w0, 3..5 r1w0, 6..8 r2w0"
        assert view.to_png()[:8] == b"\x89PNG\r\n\x1a\n"
