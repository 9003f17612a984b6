"""The example factories: real data, the same values as their sources, rebuildable in workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clorch_nb import data, examples


def test_digits_equal_scikit_learn_load_digits() -> None:
    from sklearn.datasets import load_digits

    d = load_digits()
    X, y = examples.digits_tensors(flat=False)  # noqa: N806
    assert torch.equal(X.squeeze(1), torch.from_numpy((d.images / 16.0).astype(np.float32)))
    assert torch.equal(y, torch.from_numpy(d.target.astype(np.int64)))


def test_digits_dataset_rebuilds_from_its_process_spec() -> None:
    ds = examples.digits_dataset()
    rebuilt = ds.process_spec.build()
    idx = torch.tensor([0, 5, 1796])
    assert torch.equal(ds.get_batch(idx)["data"], rebuilt.get_batch(idx)["data"])
    assert rebuilt.get_item(1796)["target"].item() == 8


def test_augmented_digits_seeded_items_are_deterministic_and_shifted_copies() -> None:
    a = examples.augmented_digits(work=1, seed=3)
    b = a.process_spec.build()
    assert torch.equal(a.get_item(7)["data"], b.get_item(7)["data"])
    assert a.get_item(7)["target"].item() == 7
    assert a.get_item(7)["data"].shape == (1, 8, 8)


def test_image_folder_decodes_the_written_pngs(tmp_path: pytest.TempPathFactory) -> None:
    root = examples.write_digit_pngs(tmp_path, limit=12, scale=1)
    ds = examples.image_folder_dataset(str(root))
    X, y = examples.digits_tensors(flat=False)  # noqa: N806
    assert data.get_size(ds) == 12
    item = ds.get_item(0)  # files sorted by class then name: class 0 first
    i = int(item["path"].rsplit("/", 1)[1][:4])
    assert item["target"].item() == y[i].item()
    # 8-bit PNG round trip: within half a grey level of the original
    assert torch.allclose(item["data"], X[i], atol=0.5 / 255 + 1e-6)


def test_pydoc_text_is_deterministic_english() -> None:
    text = examples.pydoc_text()
    assert len(text) > 300_000
    assert text == examples.pydoc_text()
    assert " the " in text[:10_000]
