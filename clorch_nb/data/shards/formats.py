"""How a shard's bytes become items: WebDataset tar, JSONL, Parquet, or a user's function.

Every format does three things:

1. **scan** a whole shard once (when it is counted): the number of items and where each starts,
   so an item can later be reached without reading what comes before it. Tar and JSONL record
   the byte offset of every item (``offsets``, ``count + 1`` of them: item ``i`` is bytes
   ``offsets[i]:offsets[i+1]``); Parquet records its row groups' sizes; a callable format
   records only the count (reaching item ``k`` then costs reading ``k`` items).
2. **read** items ``[first, stop)`` as *raw* values (a tar group's key and file contents, cut
   from the read by the layout, or its bytes without one; a JSON line; a Parquet row): one
   ranged read, what a worker keeps in its block cache.
3. **decode** one raw value into the item (``{"__key__": ..., "jpg": bytes, ...}`` for a tar,
   the parsed object for JSONL, the row dict for Parquet), before the user's ``transform``.

A corrupt or truncated shard raises :class:`~clorch_nb.errors.ShardError` naming the shard and
the item offset where it broke; an empty shard is zero items, not an error.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from clorch_nb.data.shards.storage import Storage
from clorch_nb.data.shards.tar import TarError, group_key, header_ok, read_members
from clorch_nb.errors import ConfigError, ShardError

__all__ = [
    "CallableFormat",
    "FormatName",
    "JsonlFormat",
    "ParquetFormat",
    "Scan",
    "ShardFormat",
    "TarFormat",
    "TarLayout",
    "format_for",
]

FormatName = Literal["auto", "webdataset", "jsonl", "parquet"]

_EXTENSIONS = {".tar": "webdataset", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}


@dataclass(frozen=True)
class TarLayout:
    """Where the files of a tar's items lie, found when counting: an item is cut from a ranged
    read by slicing, without parsing its headers again.

    Attributes:
        exts (tuple[str, ...]): the distinct (lower-cased) extensions, in order of appearance.
        fields (np.ndarray): ``(M, 3)``: each file's ``(extension id, data offset, size)``, the
            offset in bytes from the start of its item, over all ``M`` files of the shard's items.
        field_starts (np.ndarray): ``(count + 1,)``: item ``i``'s files are
            ``fields[field_starts[i]:field_starts[i + 1]]``.
        keys (np.ndarray): ``(count, 2)``: each item's key as ``(byte offset, nbytes)`` of its
            UTF-8 bytes from the start of its item (where its first file's name lies).

    The arrays are int32 when every value fits (about 36 bytes an item of two files), else int64.
    """

    exts: tuple[str, ...]
    fields: np.ndarray
    field_starts: np.ndarray
    keys: np.ndarray


@dataclass(frozen=True)
class Scan:
    """What counting one shard found.

    Attributes:
        count (int): items in the shard (0 for an empty shard).
        offsets (np.ndarray | None): int64 ``(count + 1,)`` byte offsets (tar, JSONL).
        row_groups (tuple[int, ...] | None): rows per row group (Parquet).
        tar_layout (TarLayout | None): where each tar item's files and key lie (None for other
            formats, for a tar with a name not stored in one piece, and in an index written
            before it existed: such items are parsed from their bytes).
    """

    count: int
    offsets: np.ndarray | None = None
    row_groups: tuple[int, ...] | None = None
    tar_layout: TarLayout | None = None


class ShardFormat(Protocol):
    """The interface every format implements (see the module docstring)."""

    name: str

    def scan(self, storage: Storage, path: str) -> Scan:
        """Count the shard's items and record where each starts (once, when counting)."""
        ...

    def read(self, storage: Storage, path: str, scan: Scan, first: int, stop: int) -> list[Any]:
        """The raw items ``[first, stop)`` (bytes of a tar group or a line, a Parquet row)."""
        ...

    def decode(self, raw: Any, path: str, offset: int) -> Any:
        """One raw item as the item the user sees (before ``transform``)."""
        ...


def _split(blob: bytes, offsets: np.ndarray, first: int, stop: int) -> list[bytes]:
    base = int(offsets[first])
    return [blob[int(offsets[i]) - base : int(offsets[i + 1]) - base] for i in range(first, stop)]


class TarFormat:
    """WebDataset tar: consecutive files with the same key (the path up to the first dot of the
    file name) are one item ``{"__key__": key, "__url__": shard, ext: bytes, ...}``, as
    ``webdataset.tariterators.group_by_keys`` groups them."""

    name = "webdataset"

    def scan(self, storage: Storage, path: str) -> Scan:
        """Read every header (data is skipped by seeking) and record each group's start, and
        where each file's data and each key lie (:class:`TarLayout`)."""
        starts: list[int] = []
        last_key: str | None = None
        end = 0
        exts: dict[str, int] = {}
        fields: list[tuple[int, int, int]] = []
        field_starts: list[int] = []
        keys: list[tuple[int, int]] = []
        contiguous = True
        seen: dict[str, int] = {}  # key -> its item (a key met again later is refused, B59)
        here: dict[str, str] = {}  # the current item's fields -> the file that gave each
        with storage.open(path) as f:
            try:
                for member in read_members(f, with_data=False):
                    key = group_key(member.name)
                    if not key:
                        continue  # a file without an extension: WebDataset skips it too
                    if key != last_key:
                        if key in seen:
                            _refuse_repeat(path, member.name, key, seen[key], len(starts))
                        seen[key] = len(starts)
                        here = {}
                        starts.append(member.header_offset)
                        last_key = key
                        field_starts.append(len(fields))
                        keys.append((member.name_offset - starts[-1], len(key.encode("utf-8"))))
                    contiguous = contiguous and member.name_offset >= 0
                    ext = member.name[len(key) + 1 :].lower()
                    if ext in here:  # one item, two files for one field: one would be lost
                        _refuse_duplicate(path, member.name, here[ext], ext, len(starts) - 1)
                    here[ext] = member.name
                    fields.append(
                        (
                            exts.setdefault(ext, len(exts)),
                            member.data_offset - starts[-1],
                            member.size,
                        )
                    )
                    end = member.end_offset
            except TarError as exc:
                # a file of the item being read, or the first file of the next one
                same = exc.name is not None and group_key(exc.name) == last_key
                at = len(starts) - 1 if same else len(starts)
                raise ShardError(
                    f"shard {path!r} is not a valid tar at item {at}: {exc}. The file is "
                    "truncated or corrupt; rewrite it",
                    shard=path,
                    offset=at,
                ) from exc
        layout = None
        if contiguous:
            arrays = [
                np.asarray(a, dtype=np.int64) for a in (fields, [*field_starts, len(fields)], keys)
            ]
            small = all(a.size == 0 or int(a.max()) < 2**31 for a in arrays)
            fa, sa, ka = (a.astype(np.int32) if small else a for a in arrays)
            layout = TarLayout(tuple(exts), fa.reshape(-1, 3), sa, ka.reshape(-1, 2))
        return Scan(len(starts), np.asarray([*starts, end], dtype=np.int64), tar_layout=layout)

    def read(self, storage: Storage, path: str, scan: Scan, first: int, stop: int) -> list[Any]:
        """Raw items ``[first, stop)`` from one ranged read: ``(key, [(ext, bytes), ...])`` cut
        by the layout (the first header's checksum checked: the shard still has a header where
        it was counted), or each group's bytes without a layout.

        Raises:
            ShardError: the read does not start with a valid header (the shard changed).
        """
        assert scan.offsets is not None
        base = int(scan.offsets[first])
        blob = storage.read_range(path, base, int(scan.offsets[stop]))
        layout = scan.tar_layout
        if layout is None:
            return _split(blob, scan.offsets, first, stop)
        if stop > first and not header_ok(blob[:512]):
            raise ShardError(
                f"shard {path!r}, item {first}: no valid tar header where it was counted; the "
                "shard changed since it was counted or is corrupt",
                shard=path,
                offset=first,
            )
        starts = layout.field_starts[first : stop + 1].astype(np.int64)
        item_at = scan.offsets[first:stop] - base  # each item's start in the read
        cuts = layout.fields[starts[0] : starts[-1]].astype(np.int64)
        data_at = np.repeat(item_at, np.diff(starts)) + cuts[:, 1]
        exts = layout.exts
        pieces = [
            (exts[e], blob[a:b])
            for e, a, b in zip(
                cuts[:, 0].tolist(), data_at.tolist(), (data_at + cuts[:, 2]).tolist(), strict=True
            )
        ]
        bounds = (starts - starts[0]).tolist()
        keys = layout.keys[first:stop].astype(np.int64)
        key_at = (item_at + keys[:, 0]).tolist()
        out: list[Any] = []
        try:
            for k, (at, n) in enumerate(zip(key_at, keys[:, 1].tolist(), strict=True)):
                out.append((blob[at : at + n].decode("utf-8"), pieces[bounds[k] : bounds[k + 1]]))
        except UnicodeDecodeError as exc:
            raise ShardError(
                f"shard {path!r}, item {first + len(out)}: its key is not where it was counted "
                f"({exc}); the shard changed since it was counted or is corrupt",
                shard=path,
                offset=first + len(out),
            ) from exc
        return out

    def decode(self, raw: Any, path: str, offset: int) -> Any:
        """The item dict of one group: from its cut ``(key, fields)``, or parsed from its bytes."""
        if isinstance(raw, tuple):
            key, fields = raw
            cut: dict[str, Any] = {"__url__": path, "__key__": key}
            cut.update(fields)
            return cut
        item: dict[str, Any] = {"__url__": path}
        try:
            for member in read_members(io.BytesIO(raw), with_data=True, require_end=False):
                key = group_key(member.name)
                if not key:
                    continue
                ext = member.name[len(key) + 1 :].lower()
                item.setdefault("__key__", key)
                if key != item["__key__"]:
                    raise TarError(f"file {member.name!r} does not belong to key {item['__key__']}")
                if ext in item:
                    raise TarError(f"file {member.name!r} repeats field {ext!r} of its item")
                item[ext] = member.data
        except TarError as exc:
            raise ShardError(
                f"shard {path!r}, item {offset}: {exc}; the shard changed or is corrupt",
                shard=path,
                offset=offset,
            ) from exc
        return item


def _refuse_duplicate(path: str, name: str, first: str, ext: str, item: int) -> None:
    """Raise: one item has two files for field ``ext`` (appended twice, ``x.JPG`` next to
    ``x.jpg``); reading it by assignment would silently keep only the last (B59)."""
    raise ShardError(
        f"shard {path!r}, item {item}: {name!r} repeats field {ext!r} of its item (already given "
        f"by {first!r}; extensions are compared in lower case, as WebDataset does), so one of "
        "the two files would be lost. WebDataset refuses it too ('duplicate file name in tar "
        "file'); rewrite the shard with one file per field",
        shard=path,
        offset=item,
    )


def _refuse_repeat(path: str, name: str, key: str, first: int, item: int) -> None:
    """Raise: key ``key`` comes back after other items (an appended or merged tar): two items
    under one key would pair one sample's files with another's (B59)."""
    raise ShardError(
        f"shard {path!r}, item {item}: {name!r} starts a second item with key {key!r} (item "
        f"{first} has it; its files are not consecutive), so two samples would share one key "
        "and their fields could be paired wrongly. Rewrite the shard with each key's files "
        "together and each key once",
        shard=path,
        offset=item,
    )


class JsonlFormat:
    """JSON Lines: one item per non-blank line, parsed with ``json.loads``."""

    name = "jsonl"

    def scan(self, storage: Storage, path: str) -> Scan:
        """Record every non-blank line's start; check a last line without a newline parses
        (else the shard was cut mid-write)."""
        offsets: list[int] = []
        pos = 0
        last = b""
        with storage.open(path) as f:
            for line in f:
                if line.strip():
                    offsets.append(pos)
                    last = line
                pos += len(line)
        if last and not last.endswith(b"\n"):
            try:
                json.loads(last)
            except ValueError as exc:
                raise ShardError(
                    f"shard {path!r} is truncated: its last line (item {len(offsets) - 1}) is "
                    f"cut mid-record ({exc}); rewrite the shard",
                    shard=path,
                    offset=len(offsets) - 1,
                ) from exc
        return Scan(len(offsets), np.asarray([*offsets, pos], dtype=np.int64))

    def read(self, storage: Storage, path: str, scan: Scan, first: int, stop: int) -> list[Any]:
        """Raw line bytes of items ``[first, stop)`` (blank lines between them dropped)."""
        assert scan.offsets is not None
        blob = storage.read_range(path, int(scan.offsets[first]), int(scan.offsets[stop]))
        return [_first_line(b) for b in _split(blob, scan.offsets, first, stop)]

    def decode(self, raw: Any, path: str, offset: int) -> Any:
        """``json.loads`` of the line; a bad line names the shard and the item."""
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ShardError(
                f"shard {path!r}, item {offset} is not valid JSON ({exc}): {bytes(raw)[:60]!r}",
                shard=path,
                offset=offset,
            ) from exc


def _first_line(chunk: bytes) -> bytes:
    """A line's bytes without the blank lines that followed it."""
    end = chunk.find(b"\n")
    return chunk if end < 0 else chunk[: end + 1]


#: the largest decoded row-group span (Arrow columns, not Python objects) a ParquetFormat keeps
#: for the next read, in bytes
PARQUET_KEEP_BYTES = 64 << 20


class ParquetFormat:
    """Parquet through pyarrow: one item per row (a dict column -> value); items are reached by
    row group. Only the rows asked for become Python objects (the Arrow table is sliced first),
    and the last decoded row-group span is kept (as Arrow columns, up to
    :data:`PARQUET_KEEP_BYTES`) for the reads that follow: pyarrow writes one row group of up
    to a million rows by default, and decoding it for every block made an epoch cost
    O(rows**2 / block) and every read hold the whole shard as Python objects (B60)."""

    name = "parquet"

    def __init__(self) -> None:
        self._lock = threading.Lock()  # thread workers share the format
        # (path, its Scan (the count this read belongs to: a rewritten shard counted again is
        # a new Scan), g0, g1, the Arrow table of row groups [g0, g1))
        self._kept: tuple[str, Scan, int, int, Any] | None = None

    def _file(self, storage: Storage, path: str, f: Any) -> Any:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                f"shard {path!r} is Parquet, which needs pyarrow: pip install 'clorch-nb[remote]'"
            ) from None
        try:
            return pq.ParquetFile(f)
        except Exception as exc:
            raise ShardError(
                f"shard {path!r} is not a readable Parquet file ({type(exc).__name__}: {exc}); "
                "it is truncated or corrupt",
                shard=path,
                offset=0,
            ) from exc

    def scan(self, storage: Storage, path: str) -> Scan:
        """The row count of every row group, from the footer."""
        with storage.open(path) as f:
            meta = self._file(storage, path, f).metadata
            groups = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
        return Scan(sum(groups), row_groups=groups)

    def read(self, storage: Storage, path: str, scan: Scan, first: int, stop: int) -> list[Any]:
        """Rows ``[first, stop)`` as dicts, from the row groups that hold them."""
        assert scan.row_groups is not None
        bounds = np.concatenate([[0], np.cumsum(scan.row_groups)])
        g0 = int(np.searchsorted(bounds, first, side="right") - 1)
        g1 = int(np.searchsorted(bounds, stop, side="left"))
        kept = self._kept
        if (
            kept is not None
            and kept[0] == path
            and kept[1] is scan
            and kept[2] <= g0 <= g1 <= kept[3]
        ):
            g0, table = kept[2], kept[4]  # decoded by an earlier read
        else:
            with storage.open(path) as f:
                pf = self._file(storage, path, f)
                try:
                    table = pf.read_row_groups(list(range(g0, g1)))
                except Exception as exc:
                    raise ShardError(
                        f"shard {path!r}: row groups {g0}..{g1 - 1} (items {first}..{stop - 1}) "
                        f"cannot be read ({type(exc).__name__}: {exc})",
                        shard=path,
                        offset=first,
                    ) from exc
            if table.nbytes <= PARQUET_KEEP_BYTES:
                with self._lock:
                    self._kept = (path, scan, g0, g1, table)
        base = int(bounds[g0])
        return table.slice(first - base, stop - first).to_pylist()

    def decode(self, raw: Any, path: str, offset: int) -> Any:
        """The row dict itself."""
        return raw


class CallableFormat:
    """A user's function ``fn(stream) -> iterable of items`` over the open shard. It cannot seek:
    reaching item ``k`` reads the ``k`` items before it (use tar, JSONL or Parquet for O(1)
    seeks)."""

    def __init__(self, fn: Callable[[Any], Iterable[Any]]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__qualname__", repr(fn))

    def scan(self, storage: Storage, path: str) -> Scan:
        """Count by iterating the whole shard."""
        with storage.open(path) as f:
            return Scan(sum(1 for _ in self._iterate(f, path)))

    def read(self, storage: Storage, path: str, scan: Scan, first: int, stop: int) -> list[Any]:
        """Items ``[first, stop)``, reading (and dropping) the ``first`` before them."""
        out: list[Any] = []
        with storage.open(path) as f:
            for i, item in enumerate(self._iterate(f, path)):
                if i >= stop:
                    break
                if i >= first:
                    out.append(item)
        if len(out) != stop - first:
            raise ShardError(
                f"shard {path!r} gave {first + len(out)} items, fewer than the {stop} counted: "
                "it changed since it was counted",
                shard=path,
                offset=first + len(out),
            )
        return out

    def _iterate(self, f: Any, path: str) -> Iterable[Any]:
        i = 0
        try:
            for i, item in enumerate(self.fn(f)):  # noqa: B007 - i names the failing item
                yield item
        except ShardError:
            raise
        except Exception as exc:
            raise ShardError(
                f"shard {path!r}: format function {self.name} failed near item {i} "
                f"({type(exc).__name__}: {exc})",
                shard=path,
                offset=i,
            ) from exc

    def decode(self, raw: Any, path: str, offset: int) -> Any:
        """The item as the function yielded it."""
        return raw


_BUILTIN: dict[str, ShardFormat] = {
    "webdataset": TarFormat(),
    "jsonl": JsonlFormat(),
    "parquet": ParquetFormat(),
}


def format_for(fmt: Any, path: str) -> ShardFormat:
    """The reader for one shard: a named format, the shard's extension for ``"auto"``, or a
    callable wrapped in :class:`CallableFormat`.

    Raises:
        ConfigError: an unknown format name, or ``"auto"`` with an unknown extension (both
            name the shard and the choices).

    Example:
        >>> format_for("auto", "s3://b/train-0001.tar").name
        'webdataset'
    """
    if callable(fmt):
        return CallableFormat(fmt)
    if fmt == "auto":
        lower = path.lower().split("?", 1)[0]
        for ext, name in _EXTENSIONS.items():
            if lower.endswith(ext):
                return _BUILTIN[name]
        raise ConfigError(
            f"format='auto' cannot tell the format of shard {path!r} from its extension (known: "
            f"{', '.join(_EXTENSIONS)}); pass format='webdataset', 'jsonl', 'parquet' or a "
            "function stream -> items"
        )
    if fmt in _BUILTIN:
        return _BUILTIN[fmt]
    raise ConfigError(
        f"format={fmt!r} must be 'auto', 'webdataset', 'jsonl', 'parquet' or a function "
        "stream -> iterable of items"
    )
