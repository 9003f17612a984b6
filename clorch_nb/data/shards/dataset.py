"""``shard_dataset``: files of items (WebDataset tars, JSONL, Parquet) on disk or in a bucket,
seen by the loader as one map-style dataset of ``get_size()`` items, read sequentially.

1. **build** (once, in this process): expand the sources, pick each shard's format, count every
   shard (or reuse the cached index): :func:`shard_dataset`.
2. **plan** (every epoch): the sampler from :func:`~clorch_nb.data.distributed_sampler` plans
   work items over the counts (:mod:`.work_plan`), so batch ``b`` of a rank is cut from worker
   ``b % W``'s own contiguous stretch of shards.
3. **read** (in the workers): :meth:`ShardDataset.get_batch` maps global indices to (shard, item)
   and reads what it lacks with one ranged read per gap inside a block (from a URL, the whole
   block in one request: a request costs milliseconds there), keeping the raw items it read but
   has not yet handed out in a small cache (``cache_items``, popped on use). A tar item is cut
   from the read by slicing, at the places its counting recorded (no header parsed again). A worker
   therefore reads each block of its stretch once, front to back, whatever the shuffle inside
   the block; memory holds the blocks in flight, never a shard.

Process workers rebuild the dataset from :attr:`ShardDataset.process_spec` (plain data: paths,
formats, the counted index, storage options, the transform's import path); no user
``process_spec`` is needed when ``transform`` (and a callable ``format``) is an importable
module-level function.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from clorch_nb._checks import check_int
from clorch_nb.data.datasets.collate import default_collate
from clorch_nb.data.datasets.process_spec import ProcessSpec
from clorch_nb.data.shards.formats import CallableFormat, Scan, ShardFormat
from clorch_nb.data.shards.index import ShardIndex
from clorch_nb.data.shards.sampler import ShardSampler
from clorch_nb.data.shards.storage import Storage
from clorch_nb.data.shards.work_plan import Run, WorkPlan, WorkSettings, plan_epoch
from clorch_nb.data.workers.base import add_note
from clorch_nb.errors import ShardError

__all__ = ["REBUILD", "ShardDataset", "replace_block"]

#: the factory a process worker calls to rebuild a shard dataset (see :mod:`.build`)
REBUILD = "clorch_nb.data.shards.build:rebuild_shard_dataset"


#: the most blocks whose handed-out items a copy remembers (a byte per item of each)
_SERVED_BLOCKS = 256
_MISSING: Any = object()


class ShardDataset:
    """Items stored in shard files; built by :func:`shard_dataset` (see the module docstring).

    Memory: a copy (one per worker) keeps at most ``cache_items`` raw items read but not yet
    handed out (each its payload plus about 1 KiB of tar header and dict; from a URL a whole
    block is read at once, and with ``cache_items < block_items`` what does not fit is dropped
    and read again later), so while streaming a worker's RSS grows by at most
    ``cache_items * (item_nbytes + 1 KiB)`` plus the ``prefetch_factor`` batches on their way
    out, and the consuming process's by the ``prefetch_factor * num_workers`` batches in
    flight, plus the allocator's slack (16 MiB in ``tests/system/test_shards_memory.py``);
    nothing grows with the number or size of the shards.

    Attributes:
        paths (tuple[str, ...]): the shards, in source order.
        counts (tuple[int, ...]): items per shard.
        block_items (int): the largest block a worker permutes and keeps in memory.
        cache_items (int): the most raw items a copy keeps (default ``8 * block_items``).
    """

    def __init__(
        self,
        index: ShardIndex,
        formats: Sequence[ShardFormat],
        storage: Storage,
        *,
        transform: Callable[[Any], Any] | None = None,
        block_items: int = 256,
        cache_items: int | None = None,
        spec_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.paths = index.paths
        self.counts = index.counts
        self.block_items = check_int("block_items", block_items, minimum=1)
        self.cache_items = check_int(
            "cache_items", cache_items if cache_items is not None else 8 * block_items, minimum=1
        )
        self.transform = transform
        self.storage = storage
        self._index = index
        self._scans: list[Scan | None] = list(index.scans)
        self._formats = list(formats)
        self._offsets = np.concatenate([[0], np.cumsum(index.counts, dtype=np.int64)])
        self._cache: OrderedDict[tuple[int, int], Any] = OrderedDict()  # raw items not handed out
        # per block, a byte per item: 1 once handed out (a later read spanning it skips it)
        self._served: OrderedDict[tuple[int, int], bytearray] = OrderedDict()
        self._lock = threading.Lock()  # guards the cache
        self._stripes = [threading.Lock() for _ in range(64)]  # one reader per block at a time
        self._spec_kwargs = spec_kwargs
        # remote shards: one request per block, not per batch span (a request costs ~ms)
        self._whole_blocks = storage.remote(self.paths)

    # -- the dataset protocol -------------------------------------------------------------------

    def get_size(self) -> int:
        """Items in all shards."""
        return int(self._offsets[-1])

    def __len__(self) -> int:
        return self.get_size()

    def locate(self, idx: int) -> tuple[int, int]:
        """``(shard position, item offset in it)`` of global index ``idx``.

        Raises:
            IndexError: ``idx`` outside ``[0, get_size())``.
        """
        if not 0 <= idx < self.get_size():
            raise IndexError(f"index {idx} is out of range for {self.get_size()} shard items")
        s = int(np.searchsorted(self._offsets, idx, side="right") - 1)
        return s, int(idx - self._offsets[s])

    def get_item(self, idx: int) -> Any:
        """Item ``idx``: its block is read (and kept) on a miss, so neighbours are cheap."""
        return self.get_items([idx], whole_block=True)[0]

    def get_batch(self, indices: torch.Tensor | Sequence[int]) -> Any:
        """``default_collate`` of :meth:`get_items` (the loader's one-call batch path)."""
        return default_collate(self.get_items(indices))

    def get_items(
        self, indices: torch.Tensor | Sequence[int], *, whole_block: bool = False
    ) -> list:
        """The items at global ``indices``, decoded and transformed, in that order.

        Reads only what the cache lacks: per block, the gaps between cached items inside the
        span of the items asked for (``whole_block``: the whole block, for item-by-item access).

        Raises:
            IndexError: an index outside the dataset.
            ShardError: a shard is unreadable or corrupt (names the shard and item offset).
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self.get_size()):
            self.locate(int(idx[(idx < 0) | (idx >= self.get_size())][0]))  # raises, naming it
        shards = np.searchsorted(self._offsets, idx, side="right") - 1
        keys = list(zip(shards.tolist(), (idx - self._offsets[shards]).tolist(), strict=True))
        raws = self._take(keys, whole_block or self._whole_blocks)
        formats, paths, transform = self._formats, self.paths, self.transform
        out = []
        for key in keys:
            s, i = key
            item = formats[s].decode(raws[key], paths[s], i)
            if transform is not None:
                try:
                    item = transform(item)
                except Exception as exc:
                    key_name = item.get("__key__") if isinstance(item, dict) else None
                    add_note(
                        exc,
                        f"[clorch_nb] in transform for shard {paths[s]!r}, item {i}"
                        + (f" (key {key_name!r})" if key_name is not None else ""),
                    )
                    raise
            out.append(item)
        return out

    # -- reading --------------------------------------------------------------------------------

    def _take(self, keys: list[tuple[int, int]], whole_block: bool) -> dict[tuple[int, int], Any]:
        got: dict[tuple[int, int], Any] = {}
        groups: dict[tuple[int, int], list[int]] = {}
        for s, i in keys:
            groups.setdefault((s, i // self.block_items), []).append(i)
        for (s, block), items in groups.items():
            # one reader per block at a time: a thread building the next batch of the same
            # block waits for this read and then finds its items in the cache (no double read)
            with self._stripes[hash((s, block)) % len(self._stripes)]:
                self._take_block(s, block, items, whole_block, got)
        return got

    def _take_block(
        self,
        s: int,
        block: int,
        items: list[int],
        whole_block: bool,
        got: dict[tuple[int, int], Any],
    ) -> None:
        b0 = block * self.block_items
        with self._lock:
            cache = self._cache
            missing = []
            if cache:
                hits = []
                for i in items:
                    key = (s, i)
                    raw = cache.pop(key, _MISSING)
                    if raw is not _MISSING:
                        got[key] = raw
                        hits.append(i)
                    elif key not in got:
                        missing.append(i)
                if hits:
                    self._mark_served(s, block, hits)
            else:
                missing = [i for i in items if (s, i) not in got] if got else list(items)
        if not missing:
            return
        if whole_block:
            lo, hi = b0, min(self.counts[s], b0 + self.block_items) - 1
        else:
            lo, hi = min(missing), max(missing)
        need = set(missing)
        read = self._read_span(s, block, lo, hi, need)
        for i in need:
            got[(s, i)] = read.pop(i)
        self._keep(s, block, read, served=need)

    def _mark_served(self, shard: int, block: int, items: Iterable[int]) -> None:
        """Remember ``items`` of the block as handed out (call with the lock held); a block
        whose every item is handed out is forgotten (its next read, next epoch, is whole)."""
        b0 = block * self.block_items
        served = self._served.get((shard, block))
        if served is None:
            size = min(self.block_items, self.counts[shard] - b0)
            served = self._served[(shard, block)] = bytearray(size)
            while len(self._served) > _SERVED_BLOCKS:
                self._served.popitem(last=False)  # the oldest: a block abandoned mid-way
        for i in items:
            served[i - b0] = 1
        if served.find(0) < 0:
            del self._served[(shard, block)]

    def _read_span(
        self, shard: int, block: int, lo: int, hi: int, need: set[int]
    ) -> dict[int, Any]:
        """Items ``lo..hi`` of a shard's block, one ranged read per gap, skipping those cached
        or already handed out (unless in ``need``: a padding repeat is read again)."""
        b0 = block * self.block_items
        with self._lock:
            cache = self._cache
            cached = {i for i in range(lo, hi + 1) if (shard, i) in cache} if cache else set()
            served = self._served.get((shard, block))
            if served is not None and served.find(1, lo - b0, hi - b0 + 1) >= 0:
                cached.update(i for i in range(lo, hi + 1) if served[i - b0])
            cached -= need
        if not cached:  # the usual case: one read
            return dict(zip(range(lo, hi + 1), self._read(shard, lo, hi + 1), strict=True))
        out: dict[int, Any] = {}
        i = lo
        while i <= hi:
            if i in cached:
                i += 1
                continue
            j = i
            while j + 1 <= hi and j + 1 not in cached:
                j += 1
            for k, raw in enumerate(self._read(shard, i, j + 1)):
                out[i + k] = raw
            i = j + 1
        return out

    def _read(self, shard: int, first: int, stop: int) -> list[Any]:
        path = self.paths[shard]
        scan = self._scan(shard)
        fmt = self._formats[shard]
        raws = self.storage.retry(path, lambda: fmt.read(self.storage, path, scan, first, stop))
        if len(raws) != stop - first:
            raise ShardError(
                f"shard {path!r} gave {len(raws)} items for items {first}..{stop - 1}; it changed "
                "since it was counted",
                shard=path,
                offset=first + len(raws),
            )
        return raws

    def _scan(self, shard: int) -> Scan:
        """The shard's scan; with a counts-only index, made now (once per copy) and checked."""
        scan = self._scans[shard]
        needs_positions = not isinstance(self._formats[shard], CallableFormat)
        if scan is None or (needs_positions and scan.offsets is None and scan.row_groups is None):
            path = self.paths[shard]
            fmt = self._formats[shard]
            scan = self.storage.retry(path, lambda: fmt.scan(self.storage, path))
            if scan.count != self.counts[shard]:
                raise ShardError(
                    f"shard {path!r} holds {scan.count} items but the index says "
                    f"{self.counts[shard]}; rebuild the index (index=None counts afresh)",
                    shard=path,
                )
            self._scans[shard] = scan
        return scan

    def _keep(self, shard: int, block: int, read: dict[int, Any], *, served: set[int]) -> None:
        with self._lock:
            self._mark_served(shard, block, served)
            for i, raw in read.items():
                self._cache[(shard, i)] = raw
            while len(self._cache) > self.cache_items:
                self._cache.popitem(last=False)  # the oldest: a block abandoned mid-way

    def shard_of(self, indices: torch.Tensor | Sequence[int]) -> str:
        """The shard (path or URL) holding the last of ``indices``: for a batch, the shard its
        worker is reading. The loader puts it in each ``BatchEvent.shard``, which the
        throughput monitor shows per worker. ``""`` for no indices.

        Raises:
            IndexError: the last index is outside ``[0, get_size())``.
        """
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        return self.paths[self.locate(int(flat[-1]))[0]] if flat.size else ""

    @property
    def cached_items(self) -> int:
        """Raw items read but not yet handed out (at most ``cache_items``)."""
        with self._lock:
            return len(self._cache)

    # -- plans and rebuilding -------------------------------------------------------------------

    def plan(self, settings: WorkSettings, stream: Sequence[Run] | None = None) -> WorkPlan:
        """Every rank's work items for an epoch over these shards (:func:`.plan_epoch`)."""
        return plan_epoch(self.counts, replace_block(settings, self.block_items), stream)

    def distributed_sampler(
        self, *, num_replicas: int, rank: int, seed: int, shuffle: bool, drop_last: bool
    ) -> ShardSampler:
        """The sampler :func:`~clorch_nb.data.distributed_sampler` makes for this dataset."""
        return ShardSampler(
            self,
            num_replicas=num_replicas,
            rank=rank,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )

    def replica(self) -> ShardDataset:
        """A copy that reads the same shards the same way (index, formats, storage, transform,
        block sizes) with a cache of its own: reading from it leaves this one's cache as it was
        (:func:`~clorch_nb.data.replay` rebuilds a batch from one while a loop may be reading).

        Example:
            >>> import tempfile, pathlib
            >>> from clorch_nb.data.shards import shard_dataset
            >>> d = pathlib.Path(tempfile.mkdtemp())
            >>> _ = (d / "a.jsonl").write_text("".join(f"{i}\\n" for i in range(6)))
            >>> ds = shard_dataset(str(d / "a.jsonl"), cache_dir=d, progress=False)
            >>> twin = ds.replica()
            >>> twin.get_items([4, 5]), twin.cached_items, ds.cached_items
            ([4, 5], 0, 0)
        """
        return ShardDataset(
            self._index,
            self._formats,
            self.storage,
            transform=self.transform,
            block_items=self.block_items,
            cache_items=self.cache_items,
            spec_kwargs=self._spec_kwargs,
        )

    def where(self, idx: int) -> tuple[int, str, int]:
        """``(shard position, shard path, item offset in it)`` of global index ``idx``: a
        sample's provenance (see :meth:`locate`).

        Raises:
            IndexError: ``idx`` outside ``[0, get_size())``.

        Example:
            >>> import tempfile, pathlib
            >>> from clorch_nb.data.shards import shard_dataset
            >>> d = pathlib.Path(tempfile.mkdtemp())
            >>> for name, n in [("a", 3), ("b", 4)]:
            ...     _ = (d / f"{name}.jsonl").write_text("".join(f"{i}\\n" for i in range(n)))
            >>> ds = shard_dataset([str(d / "a.jsonl"), str(d / "b.jsonl")], cache_dir=d,
            ...                    progress=False)
            >>> shard, path, offset = ds.where(5)
            >>> shard, pathlib.Path(path).name, offset
            (1, 'b.jsonl', 2)
        """
        shard, offset = self.locate(idx)
        return shard, self.paths[shard], offset

    @property
    def index(self) -> ShardIndex:
        """The counted index (pass ``index=ds.index.to_dict()`` to skip counting elsewhere)."""
        return self._index

    @property
    def process_local(self) -> str | None:
        """Why only this process can read the shards (``memory://`` ones), or None. The loader
        then uses threads for ``worker_backend="auto"`` and refuses ``"process"`` with this."""
        return self.storage.process_local(self.paths)

    @property
    def process_spec(self) -> ProcessSpec | None:
        """How a process worker rebuilds this dataset; None when ``transform`` or a callable
        format cannot be imported by name (a lambda, a notebook function)."""
        if self._spec_kwargs is None:
            return None
        return ProcessSpec(REBUILD, [], self._spec_kwargs)

    def __repr__(self) -> str:
        return (
            f"ShardDataset({len(self.paths)} shards, {self.get_size()} items, "
            f"formats={sorted({f.name for f in self._formats})}, first={self.paths[0]!r})"
        )


def replace_block(settings: WorkSettings, block_items: int) -> WorkSettings:
    """``settings`` with this dataset's ``block_items``."""
    return replace(settings, block_items=block_items)
