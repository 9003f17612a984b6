"""A strict tar reader: every header checked, nothing ended early without a word.

The standard library's ``tarfile`` stops *silently* at a header with a bad checksum after the
first one (it takes it for the end of the archive), so a corrupt shard would be counted short
and its tail never read. This reader raises instead, and skips data by seeking, so counting a
local tar reads its headers only. Formats: ustar, GNU long names (``L``), pax headers
(``x``: ``path``); directories, links and global headers carry no item and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

__all__ = ["TarError", "TarMember", "group_key", "read_members"]

_BLOCK = 512
_KEY = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")


class TarError(Exception):
    """The bytes are not a well-formed tar (bad checksum, cut short); ``name`` is the member
    being read when its header was readable, else None."""

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class TarMember:
    """One regular file of a tar.

    Attributes:
        name (str): its path in the archive.
        header_offset (int): where its first header (pax or long-name header included) starts.
        end_offset (int): where the next header starts (its data rounded up to 512 bytes).
        data (bytes | None): its content, when read with ``with_data=True``.
        data_offset (int): where its content starts.
        size (int): its content's length, in bytes.
        name_offset (int): where the bytes of ``name`` (UTF-8) lie in the stream, or -1 when
            they are not one contiguous run (a ustar name with a prefix).
    """

    name: str
    header_offset: int
    end_offset: int
    data: bytes | None
    data_offset: int = 0
    size: int = 0
    name_offset: int = -1


def group_key(name: str) -> str:
    """The WebDataset key of a file: its path up to the first dot of its base name (the same
    split as ``webdataset.tariterators.base_plus_ext``); ``""`` for a name without a dot.

    Example:
        >>> group_key("train/00042.seg.png"), group_key("README")
        ('train/00042', '')
    """
    m = _KEY.match(name)
    return m.group(1) if m else ""


def _octal(field: bytes) -> int:
    if field and field[0] & 0x80:  # GNU base-256 for sizes >= 8 GiB
        return int.from_bytes(field[1:], "big")
    text = field.rstrip(b"\0 ").strip()
    return int(text, 8) if text else 0


def _checked(header: bytes, offset: int) -> None:
    stored = _octal(header[148:156])
    actual = sum(header[:148]) + 32 * 8 + sum(header[156:])
    if stored != actual:
        raise TarError(f"bad header checksum at byte {offset}")


def _pax_path(data: bytes) -> tuple[str, int] | None:
    """The ``path`` record of pax data, and where its value starts in ``data``."""
    at = 0
    for record in data.split(b"\n"):
        length, _, kv = record.partition(b" ")
        key, _, value = kv.partition(b"=")
        if key == b"path":
            return value.decode("utf-8"), at + len(length) + 1 + len(key) + 1
        at += len(record) + 1
    return None


def header_ok(header: bytes) -> bool:
    """True when ``header`` is one 512-byte tar header block with a valid checksum: the cheap
    check that a ranged read still starts where an item's header was counted.

    Example:
        >>> import io, tarfile
        >>> buf = io.BytesIO()
        >>> with tarfile.open(fileobj=buf, mode="w") as t:
        ...     t.addfile(tarfile.TarInfo("a.txt"), io.BytesIO(b""))
        >>> header_ok(buf.getvalue()[:512]), header_ok(bytes(512))
        (True, False)
    """
    if len(header) != _BLOCK or header == b"\0" * _BLOCK:
        return False
    try:
        _checked(header, 0)
    except (TarError, ValueError):
        return False
    return True


def read_members(f: IO[bytes], *, with_data: bool, require_end: bool = True) -> Iterator[TarMember]:
    """The regular files of a tar stream, in order; data is read only with ``with_data``.
    ``require_end=False`` reads a slice of a tar (some of its members, no end marker).

    Raises:
        TarError: a bad header checksum, or a member cut short by the end of the stream.

    Example:
        >>> import io, tarfile
        >>> buf = io.BytesIO()
        >>> with tarfile.open(fileobj=buf, mode="w") as t:
        ...     info = tarfile.TarInfo("a.txt"); info.size = 2
        ...     t.addfile(info, io.BytesIO(b"hi"))
        >>> [(m.name, m.data) for m in read_members(io.BytesIO(buf.getvalue()), with_data=True)]
        [('a.txt', b'hi')]
    """
    total = f.seek(0, 2)
    pos = f.seek(0)
    start, long_name, long_at = None, None, -1
    while True:
        header = f.read(_BLOCK)
        if header == b"\0" * _BLOCK:
            return  # the end-of-archive marker
        if len(header) == 0:
            if not require_end:
                return
            # every tar writer (tarfile, GNU tar, WebDataset's TarWriter) ends with zero blocks;
            # a stream ending at a member boundary without them was cut there
            raise TarError(f"stream ends at byte {pos} without the end-of-archive marker")
        if len(header) < _BLOCK:
            raise TarError(f"stream ends inside a header at byte {pos}")
        _checked(header, pos)
        start = pos if start is None else start
        header_at, data_at = pos, pos + _BLOCK
        size = _octal(header[124:136])
        kind = header[156:157]
        data_end = data_at + size
        padded_end = data_at + -(-size // _BLOCK) * _BLOCK
        if data_end > total or padded_end > total:
            raise TarError(
                f"member at byte {pos} needs {size} bytes of data; the stream ends first",
                long_name or _name(header),
            )
        want = with_data or kind in (b"x", b"L")
        data = f.read(size) if want else None
        f.seek(padded_end)
        pos = padded_end
        if kind in (b"x", b"L"):
            assert data is not None
            if kind == b"L":
                long_name, long_at = data.rstrip(b"\0").decode("utf-8"), data_at
            else:
                found = _pax_path(data)
                long_name, long_at = (None, -1) if found is None else (found[0], data_at + found[1])
            continue
        if kind not in (b"0", b"\0", b"7"):
            start, long_name = None, None  # directory, link, global header: no item
            continue
        if long_name:
            name, name_at = long_name, long_at
        else:
            prefixed = header[257:262] == b"ustar" and header[345:346] not in (b"\0", b"")
            name, name_at = _name(header), -1 if prefixed else header_at
        yield TarMember(name, start, padded_end, data, data_at, size, name_at)
        start, long_name, long_at = None, None, -1


def _name(header: bytes) -> str:
    name = header[0:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar":
        prefix = header[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8")
