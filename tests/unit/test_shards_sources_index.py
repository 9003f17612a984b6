"""Shard sources (lists, globs, brace patterns, duplicates refused) and the counted index (cached
by identity, a changed shard recounted or refused by name, a ready index accepted)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from clorch_nb.data.shards import shard_dataset
from clorch_nb.data.shards.formats import JsonlFormat
from clorch_nb.data.shards.sources import expand_braces, expand_sources
from clorch_nb.errors import ConfigError, ShardError
from tests.shard_fixtures import numbered_jsonl, numbered_tars


def test_brace_ranges_are_zero_padded_like_webdataset() -> None:
    braceexpand = pytest.importorskip("braceexpand")  # webdataset's own expander: the oracle
    for pattern in ["train-{00000..00031}.tar", "s3://b/{a,b}/x-{8..11}.tar", "p{0..0}.jsonl"]:
        assert expand_braces(pattern) == list(braceexpand.braceexpand(pattern))


def test_a_glob_is_sorted_and_a_list_keeps_its_order(tmp_path: Path) -> None:
    paths = numbered_jsonl(tmp_path, [1, 1, 1])
    assert expand_sources(str(tmp_path / "part-*.jsonl")) == [str(p) for p in paths]
    given = [str(paths[2]), str(paths[0])]
    assert expand_sources(given) == given


@pytest.mark.parametrize(
    ("sources", "match"),
    [
        ([], "sources is empty"),
        ("nothing-here-*.jsonl", "glob 'nothing-here-\\*.jsonl' matches no file"),
        (["a.jsonl", "./a.jsonl"], "shard './a.jsonl' is listed twice \\(positions 0 and 1\\)"),
        ("x-{0..2}-{1..1}-{0..1}.tar,x-0-1-0.tar", None),
        ([3], "entry 3 of type int"),
        ("a-{5..2}.tar", "ends below its start"),
    ],
)
def test_bad_sources_are_refused(sources, match) -> None:
    if match is None:
        assert len(expand_sources(sources)) == 6  # a comma outside braces is part of a name
        return
    with pytest.raises(ConfigError, match=match):
        expand_sources(sources)


def test_counts_are_cached_and_read_back_without_scanning(tmp_path, monkeypatch) -> None:
    paths = numbered_jsonl(tmp_path, [3, 0, 2])
    first = shard_dataset([str(p) for p in paths], cache_dir=tmp_path, progress=False)
    assert first.counts == (3, 0, 2)
    assert len(list(tmp_path.glob("index-*.json"))) == 1

    def no_scan(*a, **k):
        raise AssertionError("scanned a shard the index already counted")

    monkeypatch.setattr(JsonlFormat, "scan", no_scan)
    again = shard_dataset([str(p) for p in paths], cache_dir=tmp_path, progress=False)
    assert again.counts == (3, 0, 2) and again.get_item(4) == {"i": 4}


def _rewrite(path: Path, text: str) -> None:
    path.write_text(text)
    later = time.time() + 5
    os.utime(path, (later, later))  # a new mtime even on a coarse clock


def test_a_changed_shard_is_recounted_with_a_warning_naming_it(tmp_path: Path) -> None:
    paths = numbered_jsonl(tmp_path, [3, 2])
    shard_dataset([str(p) for p in paths], cache_dir=tmp_path, progress=False)
    _rewrite(paths[1], '{"i": 7}\n{"i": 8}\n{"i": 9}\n')
    with pytest.warns(UserWarning, match=r"part-00001.jsonl' changed since it was counted"):
        ds = shard_dataset([str(p) for p in paths], cache_dir=tmp_path, progress=False)
    assert ds.counts == (3, 3) and ds.get_item(5) == {"i": 9}


def test_a_changed_shard_is_refused_with_on_change_error(tmp_path: Path) -> None:
    paths = numbered_jsonl(tmp_path, [3, 2])
    shard_dataset([str(p) for p in paths], cache_dir=tmp_path, progress=False)
    _rewrite(paths[0], '{"i": 0}\n')
    with pytest.raises(ShardError, match=r"part-00000.jsonl' changed since it was counted") as e:
        shard_dataset([str(p) for p in paths], cache_dir=tmp_path, on_change="error")
    assert e.value.shard == str(paths[0])


def test_a_ready_index_is_used_as_given(tmp_path: Path, monkeypatch) -> None:
    tars = numbered_tars(tmp_path, [2, 3])
    counts = {str(t): n for t, n in zip(tars, [2, 3], strict=True)}
    ds = shard_dataset([str(t) for t in tars], index=counts, cache_dir=tmp_path, progress=False)
    assert ds.counts == (2, 3) and not list(tmp_path.glob("index-*.json"))
    assert int(ds.get_item(3)["cls"]) == 3  # offsets found by scanning that shard on first read
    saved = tmp_path / "mine.json"
    saved.write_text(json.dumps(ds.index.to_dict()))
    assert shard_dataset([str(t) for t in tars], index=saved, progress=False).counts == (2, 3)


def test_a_ready_index_with_a_wrong_count_is_caught_on_read(tmp_path: Path) -> None:
    tars = numbered_tars(tmp_path, [2, 3])
    ds = shard_dataset([str(t) for t in tars], index={str(tars[0]): 2, str(tars[1]): 4})
    with pytest.raises(ShardError, match=r"shard-00001.tar' holds 3 items but the index says 4"):
        ds.get_item(2)


def test_a_ready_index_must_cover_every_shard(tmp_path: Path) -> None:
    tars = numbered_tars(tmp_path, [2, 3])
    with pytest.raises(ConfigError, match=r"no entry for 1 shard\(s\), e.g. .*shard-00001.tar"):
        shard_dataset([str(t) for t in tars], index={str(tars[0]): 2})
    with pytest.raises(ConfigError, match=r"negative count"):
        shard_dataset([str(t) for t in tars], index={str(tars[0]): 2, str(tars[1]): -1})


def test_a_transform_that_is_not_callable_is_refused_at_once(tmp_path) -> None:
    """A user's slip (the function's name as a string) is a ConfigError naming transform when
    the dataset is made, not a bare TypeError at the first item read."""
    paths = [str(p) for p in numbered_jsonl(tmp_path, [3])]
    with pytest.raises(ConfigError, match=r"transform='decode' is not callable; pass a function"):
        shard_dataset(paths, transform="decode", cache_dir=tmp_path, progress=False)
