"""Building a :class:`~.dataset.ShardDataset`: from sources in this process
(:func:`shard_dataset`: expand, pick formats, count or reuse the index), and from plain data in
a process worker (:func:`rebuild_shard_dataset`, the factory of its ``process_spec``: the
parent's index is reused as it is, nothing is counted again).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from clorch_nb.data.datasets.process_spec import ProcessSpec
from clorch_nb.data.shards.dataset import REBUILD, ShardDataset
from clorch_nb.data.shards.formats import ShardFormat, format_for
from clorch_nb.data.shards.index import OnChange, ShardIndex, build_index
from clorch_nb.data.shards.sources import expand_sources
from clorch_nb.data.shards.storage import Storage
from clorch_nb.errors import ConfigError

__all__ = ["import_path", "rebuild_shard_dataset", "shard_dataset"]


def import_path(fn: Any) -> str | None:
    """``"module:qualname"`` of a module-level function a worker process can import, else None.

    Example:
        >>> import json; import_path(json.loads), import_path(lambda x: x)
        ('json:loads', None)
    """
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _resolve(path: str | None) -> Any:
    return None if path is None else ProcessSpec(path).resolve_factory()


def rebuild_shard_dataset(**kwargs: Any) -> ShardDataset:
    """The process-worker factory of :attr:`ShardDataset.process_spec`: the same dataset from
    plain data, without counting (the parent's index is reused as it is)."""
    paths = kwargs["paths"]
    formats = [
        format_for(_resolve(f[1:]) if f.startswith("@") else f, p)
        for f, p in zip(kwargs["formats"], paths, strict=True)
    ]
    storage = Storage(**kwargs["storage"])
    index = build_index(
        paths, formats, storage, index=kwargs["index"], progress=False, verify=False
    )
    return ShardDataset(
        index,
        formats,
        storage,
        transform=_resolve(kwargs["transform"]),
        block_items=kwargs["block_items"],
        cache_items=kwargs["cache_items"],
        spec_kwargs=kwargs,
    )


def shard_dataset(
    sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    format: Any = "auto",
    transform: Callable[[Any], Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    index: Any = None,
    cache_dir: str | os.PathLike[str] | None = None,
    on_change: OnChange = "recount",
    block_items: int = 256,
    cache_items: int | None = None,
    timeout_s: float = 60.0,
    retries: int = 3,
    progress: bool = True,
) -> ShardDataset:
    """A dataset over shard files, counted once, planned exactly over ranks and workers.

    Args:
        sources (str | PathLike | Sequence): paths or URLs (``s3://``, ``http(s)://``,
            ``memory://``, ``file://``), a glob, or a brace pattern
            (``"data/train-{00000..00031}.tar"``); see :func:`.sources.expand_sources`.
        format ("auto" | "webdataset" | "jsonl" | "parquet" | Callable): ``"auto"`` picks by
            extension (``.tar``, ``.jsonl``/``.ndjson``, ``.parquet``); a callable turns an open
            binary stream into an iterable of items (it cannot seek: see
            :class:`.formats.CallableFormat`).
        transform (Callable | None): applied to each item in the worker (decode, augment).
        storage_options (dict | None): fsspec options for URLs (plain data).
        index (str | PathLike | dict | None): a ready index (see :mod:`.index`); None counts
            the shards (in parallel, with a progress bar) or reuses the cached counts.
        cache_dir (str | PathLike | None): where the index is cached (default
            ``~/.cache/clorch_nb/shards``).
        on_change ("recount" | "error"): a shard changed since it was counted.
        block_items (int): items per shuffle block (the unit a worker permutes in memory).
        cache_items (int | None): raw items a dataset copy keeps read-but-unused (default
            ``8 * block_items``); memory is bounded by it, not by the shards.
        timeout_s (float), retries (int): per-attempt bound and retries of a network read.
        progress (bool): show a progress bar while counting.

    Returns:
        ShardDataset: ``get_size()`` is the total item count.

    Raises:
        ConfigError: bad sources (empty, duplicates, a glob matching nothing), an unknown
            format, a bad option.
        ShardError: a missing, unreadable, truncated or corrupt shard (named, with the offset).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> for k in range(2):
        ...     _ = (d / f"part-{k}.jsonl").write_text("".join(f'{{"x": {k * 3 + i}}}\\n'
        ...                                                    for i in range(3)))
        >>> ds = shard_dataset(str(d / "part-{0..1}.jsonl"), cache_dir=d, progress=False)
        >>> ds.get_size(), ds.get_item(4)
        (6, {'x': 4})
    """
    if transform is not None and not callable(transform):
        raise ConfigError(
            f"transform={transform!r} is not callable; pass a function item -> item (a "
            "module-level one, so process workers can import it), or None"
        )
    opts = dict(storage_options or {})
    storage = Storage(opts, timeout_s=timeout_s, retries=retries)
    paths = expand_sources(sources, storage_options=opts)
    formats = [format_for(format, p) for p in paths]
    counted = build_index(
        paths,
        formats,
        storage,
        index=index,
        cache_dir=cache_dir,
        on_change=on_change,
        progress=progress,
    )
    return ShardDataset(
        counted,
        formats,
        storage,
        transform=transform,
        block_items=block_items,
        cache_items=cache_items,
        spec_kwargs=_spec_kwargs(
            counted, format, formats, storage, transform, block_items, cache_items
        ),
    )


def _spec_kwargs(
    counted: ShardIndex,
    fmt: Any,
    formats: Sequence[ShardFormat],
    storage: Storage,
    transform: Any,
    block_items: int,
    cache_items: int | None,
) -> dict[str, Any] | None:
    """Plain data a process worker rebuilds the dataset from, or None if some part is not."""
    names = [f.name for f in formats]
    if callable(fmt):
        where = import_path(fmt)
        if where is None:
            return None
        names = ["@" + where] * len(formats)
    t = import_path(transform) if transform is not None else None
    if transform is not None and t is None:
        return None
    kwargs = {
        "paths": list(counted.paths),
        "formats": names,
        "storage": {
            "storage_options": storage.storage_options,
            "timeout_s": storage.timeout_s,
            "retries": storage.retries,
            "backoff_s": storage.backoff_s,
        },
        "index": counted.to_dict(),
        "transform": t,
        "block_items": block_items,
        "cache_items": cache_items,
    }
    try:
        ProcessSpec(REBUILD, [], kwargs)
    except ConfigError:
        return None  # storage_options holding objects: thread workers only
    return kwargs
