"""The example factories: real data, the same values as their sources, rebuildable in workers."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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


def test_docs_text_is_the_shipped_snapshot_with_its_licence() -> None:
    text = examples.docs_text()
    # exact length and edges: the text is a fixed snapshot, the same on every Python
    assert len(text) == 100_064
    assert text.startswith('The "assert" statement ')
    assert text.endswith("when the function definition is executed.")
    assert "\n" not in text and " the " in text[:10_000]
    assert examples.docs_text(max_chars=60_000) == text[:60_000]
    with pytest.raises(ValueError, match="max_chars=-1"):
        examples.docs_text(max_chars=-1)
    corpus = Path(examples.__file__).parent / "corpus"
    assert "Python Software Foundation" in (corpus / "LICENSE-PSF.txt").read_text()
    shipped = tomllib.loads((Path(examples.__file__).parents[1] / "pyproject.toml").read_text())
    assert "corpus/*.txt" in shipped["tool"]["setuptools"]["package-data"]["clorch_nb"]


def test_docs_text_does_not_read_pydoc_data() -> None:
    # pydoc_data.topics changes between patch releases: nothing in the package may read it
    package = Path(examples.__file__).parent
    readers = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if re.search(r"^\s*(from|import)\s+pydoc_data", p.read_text(encoding="utf-8"), re.M)
    ]
    assert not readers, f"modules that read pydoc_data: {readers}"
