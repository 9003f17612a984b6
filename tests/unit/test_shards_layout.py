"""The tar layout recorded when counting (where each file's data and each key lie): items cut by
slicing are exactly the items written (ustar, GNU long names, pax), a name stored in two pieces
falls back to parsing, an index of the previous version is recounted rather than misread, a
shard rewritten in place since counting is refused by name, and remote shards are read a whole
block per request."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from clorch_nb.data.shards import shard_dataset
from clorch_nb.data.shards.storage import Storage
from clorch_nb.errors import ShardError
from tests.shard_fixtures import numbered_tars


def _tar(path: Path, keys: list[str], fmt: int) -> list[dict]:
    """A tar of items ``{key}.cls`` (the item's number) and ``{key}.bin`` (that many bytes), in
    tarfile's ``fmt``; returns the items as the dataset must give them."""
    items = []
    with tarfile.open(path, "w", format=fmt) as tar:
        for n, key in enumerate(keys):
            item = {"__url__": str(path), "__key__": key, "cls": str(n).encode(), "bin": bytes(n)}
            for ext in ("cls", "bin"):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(item[ext])
                tar.addfile(info, io.BytesIO(item[ext]))
            items.append(item)
    return items


@pytest.mark.parametrize(
    ("fmt", "keys"),
    [
        (tarfile.USTAR_FORMAT, ["a/0", "a/1", "b/2"]),
        (tarfile.GNU_FORMAT, ["d/" + "n" * 150, "short", "e/" + "é" * 120]),
        (tarfile.PAX_FORMAT, ["d/" + "p" * 150, "x", "ü/" + "q" * 200]),
    ],
    ids=["ustar", "gnu-long-names", "pax"],
)
def test_items_cut_by_the_layout_are_the_items_written(tmp_path: Path, fmt, keys) -> None:
    want = _tar(tmp_path / "s.tar", keys, fmt)
    ds = shard_dataset(str(tmp_path / "s.tar"), cache_dir=tmp_path, progress=False)
    assert ds.index.scans[0].tar_layout is not None
    assert ds.get_items(range(len(keys))) == want
    assert [ds.get_item(i) for i in (2, 0, 1)] == [want[2], want[0], want[1]]


def test_a_name_split_into_ustar_prefix_is_parsed_instead(tmp_path: Path) -> None:
    keys = ["p" * 90 + "/" + "q" * 20, "r"]  # over 100 bytes: ustar stores a prefix
    want = _tar(tmp_path / "s.tar", keys, tarfile.USTAR_FORMAT)
    ds = shard_dataset(str(tmp_path / "s.tar"), cache_dir=tmp_path, progress=False)
    assert ds.index.scans[0].tar_layout is None
    assert ds.get_items([0, 1]) == want


def test_an_index_of_the_previous_version_is_recounted_not_misread(tmp_path: Path) -> None:
    tars = [str(t) for t in numbered_tars(tmp_path, [3, 2])]
    shard_dataset(tars, cache_dir=tmp_path, progress=False)
    (cached,) = tmp_path.glob("index-*.json")
    old = json.loads(cached.read_text())
    old["version"] = 1
    for entry in old["shards"].values():
        del entry["tar_layout"]
        entry["count"] = 7  # what a misread would plan with
    cached.write_text(json.dumps(old))
    ds = shard_dataset(tars, cache_dir=tmp_path, progress=False)
    assert ds.counts == (3, 2) and all(s.tar_layout is not None for s in ds.index.scans)
    assert json.loads(cached.read_text())["version"] == 3
    # the same version-1 dict passed as index= is trusted as given and read by parsing
    for entry in old["shards"].values():
        entry["count"] = 3 if entry is old["shards"][tars[0]] else 2
    given = shard_dataset(tars, index=old, progress=False)
    assert all(s.tar_layout is None for s in given.index.scans)
    assert given.get_items(range(5)) == ds.get_items(range(5))


def test_a_version_2_index_is_read_as_it_is_and_version_3_is_compressed(tmp_path: Path) -> None:
    """Version 3 writes the arrays zlib-compressed (the index travels in every process worker's
    spec); a version-2 cache (the same arrays, plain base64) is still read, not recounted."""
    tars = [str(t) for t in numbered_tars(tmp_path, [40, 25])]
    first = shard_dataset(tars, cache_dir=tmp_path, progress=False)
    (cached,) = tmp_path.glob("index-*.json")
    v3 = json.loads(cached.read_text())
    assert v3["version"] == 3
    v2 = json.loads(cached.read_text())
    v2["version"] = 2
    for e3, e2 in zip(v3["shards"].values(), v2["shards"].values(), strict=True):
        dtype = e3["tar_layout"]["dtype"]
        for holder, key, dt in [(e2, "offsets", "<i8"), *((e2["tar_layout"], k, dtype) for k in (
                "fields", "field_starts", "keys"))]:  # fmt: skip
            text = holder[key]
            assert text.startswith("zlib:")
            raw = zlib.decompress(base64.b64decode(text[5:]))
            assert len(base64.b64encode(raw)) > len(text)  # compression paid for itself
            holder[key] = base64.b64encode(raw).decode()  # what version 2 wrote
            assert np.frombuffer(raw, dt).size > 0
    cached.write_text(json.dumps(v2))
    again = shard_dataset(tars, cache_dir=tmp_path, progress=False)
    assert json.loads(cached.read_text())["version"] == 2  # read as it is: no recount, no rewrite
    for a, b in zip(first.index.scans, again.index.scans, strict=True):
        assert np.array_equal(a.offsets, b.offsets)
        assert np.array_equal(a.tar_layout.fields, b.tar_layout.fields)
        assert np.array_equal(a.tar_layout.keys, b.tar_layout.keys)
    assert again.get_items(range(65)) == first.get_items(range(65))


def test_a_shard_rewritten_in_place_since_counting_is_refused(tmp_path: Path) -> None:
    (tar,) = numbered_tars(tmp_path, [4])
    ds = shard_dataset(str(tar), cache_dir=tmp_path, progress=False)
    tar.write_bytes(bytes(tar.stat().st_size))  # same size, no headers where they were
    with pytest.raises(
        ShardError, match=r"shard-00000.tar.*item 0: no valid tar header.*changed"
    ) as err:
        ds.get_item(2)
    assert err.value.shard == str(tar) and err.value.offset == 0  # item 2's block starts at 0


def test_remote_shards_are_read_a_whole_block_per_request(tmp_path: Path, monkeypatch) -> None:
    fsspec = pytest.importorskip("fsspec")
    (tar,) = numbered_tars(tmp_path, [20])
    url = "memory://layout-test/shard-00000.tar"
    fsspec.filesystem("memory").pipe_file(url, tar.read_bytes())
    ds = shard_dataset(url, cache_dir=tmp_path, block_items=8, progress=False)
    ranges: list[tuple[int, int]] = []
    real = Storage.read_range
    monkeypatch.setattr(
        Storage, "read_range", lambda self, p, a, b: ranges.append((a, b)) or real(self, p, a, b)
    )
    offsets = ds.index.scans[0].offsets
    blocks = [(offsets[0], offsets[8]), (offsets[8], offsets[16]), (offsets[16], offsets[20])]
    for _epoch in range(2):  # the second pass reads whole blocks too (nothing left marked)
        ranges.clear()
        got = [int(ds.get_items([i, i + 1])[0]["cls"]) for i in range(0, 20, 2)]
        assert got == list(range(0, 20, 2))
        assert ranges == blocks
