"""The replay view's pure layer (samples, kinds, provenance) and its static forms."""

from __future__ import annotations

import torch

from clorch_nb import data, widgets
from clorch_nb.widgets.replay import split_batch


def _loader(ds: object, **kw: object) -> data.DataLoader:
    return data.dataloader(ds, seed=3, **kw)  # type: ignore[arg-type]


def test_images_are_split_per_sample_with_index_and_seed() -> None:
    x = torch.arange(6 * 8 * 8, dtype=torch.float32).view(6, 1, 8, 8)
    loader = _loader(data.tensor_dataset(x, torch.arange(6)), batch_size=4)
    replayed = data.replay(loader, epoch=1, batch=0)
    report = widgets.replay_report(replayed)
    assert report.kind == "images" and report.key == "data"
    assert [r.index for r in report.rows] == replayed.indices
    assert {r.seed for r in report.rows} == {replayed.seed}
    lo, hi = float(x[replayed.indices].min()), float(x[replayed.indices].max())
    for img, i in zip(report.images, replayed.indices, strict=True):
        assert img.shape == (8, 8)
        assert torch.allclose(torch.from_numpy(img), (x[i, 0] - lo) / (hi - lo))


def test_token_ids_are_decoded_and_strings_shown_as_text() -> None:
    vocab = ["<pad>", "the", "cat", "sat"]
    tokens = torch.tensor([[1, 2, 0], [1, 3, 0], [2, 3, 1]])
    ds = data.dataset(size=3, get_item=lambda i: {"ids": tokens[i], "target": torch.tensor(i)})
    replayed = data.replay(_loader(ds, batch_size=3, shuffle=False), epoch=0, batch=0)
    report = widgets.replay_report(replayed, decode=lambda ids: " ".join(vocab[t] for t in ids))
    assert report.kind == "text" and report.texts == [
        "the cat <pad>",
        "the sat <pad>",
        "cat sat the",
    ]
    # without decode= the same batch is a table
    assert widgets.replay_report(replayed).kind == "table"
    words = data.dataset(size=2, get_item=lambda i: {"s": ["a b", "c"][i]})
    replayed = data.replay(_loader(words, batch_size=2, shuffle=False), epoch=0, batch=0)
    assert widgets.replay_report(replayed).texts == ["a b", "c"]


def test_text_form_lists_every_sample() -> None:
    ds = data.tensor_dataset(torch.tensor([[0.5], [1.5], [2.5]]), torch.arange(3))
    replayed = data.replay(_loader(ds, batch_size=2, shuffle=False), epoch=0, batch=1)
    view = widgets.ReplayView.from_replay(replayed)
    s = replayed.seed
    assert view.to_text().splitlines()[1:] == [
        f"pos  index  seed{' ' * (len(str(s)) - 4)}  data  target",
        f"0    2      {s}  2.5   2",
    ]
    assert view.to_png()[:4] == b"\x89PNG"
    bundle = view.static_bundle()
    assert bundle["text/plain"] == view.to_text()
    view.close()


def test_split_batch_keeps_list_batches_and_scalars() -> None:
    samples = split_batch([torch.tensor([1, 2]), ["a", "b"], 7], 2)
    assert samples == [
        {"0": torch.tensor(1), "1": "a", "2": 7},
        {"0": torch.tensor(2), "1": "b", "2": 7},
    ]


def test_shard_samples_are_labelled_with_shard_and_offset(tmp_path) -> None:
    from tests.shard_fixtures import augmented, image_of, numbered_tars

    tars = [str(t) for t in numbered_tars(tmp_path, [5, 7])]

    def target_of(item: dict) -> dict:
        return {"target": torch.tensor(int(item["cls"]))}

    for transform, kind in [(image_of, "images"), (augmented, "text"), (target_of, "table")]:
        ds = data.shard_dataset(tars, transform=transform, cache_dir=tmp_path, progress=False)
        sampler = data.distributed_sampler(ds, num_replicas=1, rank=0, seed=0)
        loader = data.dataloader(ds, batch_size=4, sampler=sampler)
        view = widgets.ReplayView.from_loader(loader, epoch=0, batch=1)
        report = view.report
        assert report.kind == kind and report.has_shards
        expected = [(i, *ds.where(i)) for i in data.replay(loader, epoch=0, batch=1).indices]
        assert [r.label for r in report.rows] == [f"#{i} s{s}:{o}" for i, s, _, o in expected]
        lines = view.to_text().splitlines()
        assert lines[1].split()[:3] == ["pos", "index", "shard:offset"]
        for line, (i, s, _, o) in zip(lines[2:], expected, strict=True):
            assert line.split()[1:3] == [str(i), f"shard-{s:05d}.tar:{o}"]
        assert view.to_png()[:4] == b"\x89PNG"
