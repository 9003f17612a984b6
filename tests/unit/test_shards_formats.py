"""Shard formats: items exactly as WebDataset groups a tar (its own reader is the oracle), JSONL
and Parquet rows, a callable format, empty shards, and every corrupt or truncated shard refused
with its name and the item offset."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from clorch_nb.data.shards import shard_dataset
from clorch_nb.errors import ConfigError, ShardError
from tests.shard_fixtures import (
    cls_of,
    lines_format,
    numbered_jsonl,
    numbered_tars,
    write_parquet,
    write_tar,
)


def _all(ds):
    return [ds.get_item(i) for i in range(ds.get_size())]


def test_tar_items_are_grouped_exactly_as_webdataset_groups_them(tmp_path: Path) -> None:
    wds = pytest.importorskip("webdataset")
    items = [
        {"__key__": "train/a0", "jpg": b"\xff\xd8x", "cls": b"3", "seg.png": b"p"},
        {"__key__": "train/a1", "jpg": b"yy", "cls": b"4"},
        {"__key__": "b2", "json": b'{"k": 1}'},
    ]
    path = write_tar(tmp_path / "x.tar", items)
    ours = _all(shard_dataset(str(path), cache_dir=tmp_path, progress=False))
    theirs = list(wds.WebDataset(str(path), shardshuffle=False, empty_check=False))
    assert [{k: v for k, v in d.items() if k != "__local_path__"} for d in theirs] == ours
    assert ours[0] == {"__url__": str(path), "__key__": "train/a0", "jpg": b"\xff\xd8x",
                       "cls": b"3", "seg.png": b"p"}  # fmt: skip


def test_long_names_and_pax_headers_are_read(tmp_path: Path) -> None:
    key = "d/" + "n" * 150
    path = tmp_path / "long.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for ext in ("a", "b"):
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = 1
            tar.addfile(info, io.BytesIO(ext.encode()))
    ds = shard_dataset(str(path), cache_dir=tmp_path, progress=False)
    assert ds.get_size() == 1 and ds.get_item(0)["__key__"] == key
    assert ds.get_item(0)["b"] == b"b"


def test_jsonl_items_skip_blank_lines_and_keep_order(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_text('{"i": 0}\n\n{"i": 1}\n   \n{"i": 2}')  # no newline at the end: still whole
    ds = shard_dataset(str(p), cache_dir=tmp_path, progress=False)
    assert _all(ds) == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert ds.get_items([2, 0, 2]) == [{"i": 2}, {"i": 0}, {"i": 2}]


def test_parquet_rows_across_row_groups(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    rows = [{"i": i, "s": f"r{i}"} for i in range(10)]
    p = write_parquet(tmp_path / "a.parquet", rows, row_group_size=3)
    ds = shard_dataset(str(p), cache_dir=tmp_path, progress=False)
    assert ds.index.scans[0].row_groups == (3, 3, 3, 1)
    assert _all(ds) == rows
    assert ds.get_items([8, 2, 3]) == [rows[8], rows[2], rows[3]]


def test_callable_format_reads_by_iterating(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_text("x\ny\n\nz\n")
    ds = shard_dataset(str(p), format=lines_format, cache_dir=tmp_path, progress=False)
    assert _all(ds) == ["x", "y", "z"]


def test_empty_shards_hold_zero_items(tmp_path: Path) -> None:
    tars = numbered_tars(tmp_path, [0, 3, 0])
    (tmp_path / "e.jsonl").write_text("")
    assert shard_dataset([str(t) for t in tars], cache_dir=tmp_path, progress=False).counts == (
        0,
        3,
        0,
    )
    assert shard_dataset(str(tmp_path / "e.jsonl"), cache_dir=tmp_path, progress=False).counts == (
        0,
    )


def test_transform_runs_on_each_item(tmp_path: Path) -> None:
    tars = numbered_tars(tmp_path, [2, 3])
    ds = shard_dataset([str(t) for t in tars], transform=cls_of, cache_dir=tmp_path,
                       progress=False)  # fmt: skip
    assert _all(ds) == [0, 1, 2, 3, 4]


def test_transform_error_names_shard_offset_and_key(tmp_path: Path) -> None:
    (tar,) = numbered_tars(tmp_path, [3])

    def bad(item):
        if item["__key__"].endswith("00001"):
            raise KeyError("jpg")
        return item

    ds = shard_dataset(str(tar), transform=bad, cache_dir=tmp_path, progress=False)
    with pytest.raises(KeyError) as err:
        ds.get_item(1)
    assert any(f"shard {str(tar)!r}, item 1 (key 's0-00001')" in n for n in err.value.__notes__)


# -- bad shards --------------------------------------------------------------------------------


def test_truncated_tar_is_refused_with_the_shard_and_item(tmp_path: Path) -> None:
    (tar,) = numbered_tars(tmp_path, [4])
    blob = tar.read_bytes()
    cut = tmp_path / "cut.tar"
    # item 0: "cls" (header + 1 block) and an empty "bin" (header): blocks 0-2; item 1: blocks
    # 3-6, its "bin" data in block 6
    cut.write_bytes(blob[: 512 * 6 + 100])
    with pytest.raises(ShardError) as err:
        shard_dataset(str(cut), cache_dir=tmp_path, progress=False)
    assert err.value.shard == str(cut) and err.value.offset == 1
    assert "cut.tar" in str(err.value) and "item 1" in str(err.value)


def test_corrupt_tar_header_is_refused_not_counted_short(tmp_path: Path) -> None:
    (tar,) = numbered_tars(tmp_path, [4])
    blob = bytearray(tar.read_bytes())
    blob[512 * 3 + 10] ^= 0xFF  # the header of item 1's first file (see the test above)
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(blob))
    with pytest.raises(ShardError, match=r"bad.tar.*item 1.*checksum") as err:
        shard_dataset(str(bad), cache_dir=tmp_path, progress=False)
    assert err.value.offset == 1


def test_truncated_jsonl_last_line_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_text('{"i": 0}\n{"i": 1}\n{"i": ')
    with pytest.raises(ShardError, match=r"a.jsonl.*truncated.*item 2") as err:
        shard_dataset(str(p), cache_dir=tmp_path, progress=False)
    assert err.value.offset == 2


def test_corrupt_jsonl_line_is_refused_with_its_offset(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_text('{"i": 0}\n{"i" 1}\n{"i": 2}\n')
    ds = shard_dataset(str(p), cache_dir=tmp_path, progress=False)
    assert ds.get_item(0) == {"i": 0}
    with pytest.raises(ShardError, match=r"a.jsonl.*item 1 is not valid JSON") as err:
        ds.get_item(1)
    assert err.value.offset == 1


def test_corrupt_parquet_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    p = write_parquet(tmp_path / "a.parquet", [{"i": i} for i in range(5)], row_group_size=2)
    p.write_bytes(p.read_bytes()[:-20])
    with pytest.raises(ShardError, match=r"a.parquet.*not a readable Parquet file"):
        shard_dataset(str(p), cache_dir=tmp_path, progress=False)


def test_a_shard_rewritten_after_counting_is_refused_on_read(tmp_path: Path) -> None:
    (p,) = numbered_jsonl(tmp_path, [5])
    ds = shard_dataset(str(p), cache_dir=tmp_path, progress=False)
    p.write_text('{"i": 0}\n')
    with pytest.raises(ShardError, match=r"part-00000.jsonl.*shorter than when it was counted"):
        ds.get_item(4)


def test_unknown_extension_and_format_name_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"cannot tell the format of shard .*a.bin"):
        shard_dataset(str(tmp_path / "a.bin"), cache_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match=r"format='csv' must be"):
        shard_dataset(str(tmp_path / "a.bin"), format="csv", cache_dir=tmp_path)


def test_missing_shard_is_named(tmp_path: Path) -> None:
    with pytest.raises(ShardError, match=r"shard '.*nope.jsonl' cannot be read: FileNotFound"):
        shard_dataset(str(tmp_path / "nope.jsonl"), cache_dir=tmp_path, progress=False)


def test_items_are_plain_json_values(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_text("\n".join(json.dumps(v) for v in [1, "s", [1, 2], None]) + "\n")
    assert _all(shard_dataset(str(p), cache_dir=tmp_path, progress=False)) == [1, "s", [1, 2], None]
