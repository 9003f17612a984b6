"""Which shards: a list of paths or URLs, a glob, or a brace pattern, expanded to one sorted-as-
given list with every shard named once.

A brace pattern is WebDataset's and bash's numeric range: ``"train-{00000..00031}.tar"`` is 32
names, zero-padded to the width of the first bound. A glob (``*``, ``?``, ``[...]``) is matched
on the local disk, or through fsspec for a URL (``s3://bucket/train-*.tar``), and its matches
are sorted so every rank and every worker sees the same list. A list is kept in its order. A
shard named twice would be read twice an epoch, so duplicates are refused, not dropped.

A name that already names a file is that file, as Python's ``open()`` reads it: ``[``, ``]``,
``?``, ``*`` and braces are legal in file names (``run[1]/part.jsonl``), so a pattern is only
expanded when no file of that exact name exists (``glob.escape`` writes a pattern that matches a
name literally). Without this, ``run[1]`` would silently read ``run1`` instead.
"""

from __future__ import annotations

import glob as _glob
import os
import re
from collections.abc import Sequence
from typing import Any

from clorch_nb.errors import ConfigError

__all__ = ["expand_braces", "expand_sources", "is_url"]

_BRACE = re.compile(r"\{(-?\d+)\.\.(-?\d+)\}|\{([^{}]*,[^{}]*)\}")
_GLOB_CHARS = re.compile(r"[*?\[]")


def is_url(path: str) -> bool:
    """True for ``scheme://...`` (``s3://``, ``http://``, ``memory://``, ``file://``).

    Example:
        >>> is_url("s3://bucket/a.tar"), is_url("data/a.tar")
        (True, False)
    """
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def expand_braces(pattern: str) -> list[str]:
    """Every name of a brace pattern: ``{a..b}`` numeric ranges (zero-padded to the first bound's
    width, as bash and WebDataset do) and ``{x,y}`` alternatives, left to right.

    Raises:
        ConfigError: a range whose end is below its start.

    Example:
        >>> expand_braces("train-{000..002}.tar")
        ['train-000.tar', 'train-001.tar', 'train-002.tar']
        >>> expand_braces("{a,b}-{1..2}.jsonl")
        ['a-1.jsonl', 'a-2.jsonl', 'b-1.jsonl', 'b-2.jsonl']
    """
    m = _BRACE.search(pattern)
    if m is None:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end() :]
    if m.group(3) is not None:
        choices = m.group(3).split(",")
    else:
        lo, hi = int(m.group(1)), int(m.group(2))
        if hi < lo:
            raise ConfigError(
                f"brace range {m.group(0)!r} in {pattern!r} ends below its start; write "
                f"{{{m.group(2)}..{m.group(1)}}}"
            )
        width = len(m.group(1).lstrip("-"))
        choices = [str(i).zfill(width) for i in range(lo, hi + 1)]
    return [name for c in choices for name in expand_braces(head + c + tail)]


def _exists_as_named(name: str, storage_options: dict[str, Any]) -> bool:
    """True when ``name`` is itself an existing file (checked before it is read as a pattern)."""
    if not is_url(name):
        return os.path.isfile(os.path.expanduser(name))
    try:
        import fsspec  # the remote extra; only a URL with pattern characters asks

        fs, _, _ = fsspec.get_fs_token_paths(name, storage_options=storage_options)
        return bool(fs.isfile(name))
    except Exception:  # noqa: BLE001 - a failed probe means "read it as a pattern", as before
        return False


def _glob_one(pattern: str, storage_options: dict[str, Any]) -> list[str]:
    if is_url(pattern):
        import fsspec  # the remote extra; only a URL glob needs it

        fs, _, _ = fsspec.get_fs_token_paths(pattern, storage_options=storage_options)
        protocol = pattern.split("://", 1)[0]
        return sorted(f"{protocol}://{p}" if "://" not in p else p for p in fs.glob(pattern))
    return sorted(_glob.glob(os.path.expanduser(pattern)))


def expand_sources(
    sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """The shard list: brace patterns expanded, globs matched (sorted), lists kept in order.

    Args:
        sources (str | PathLike | Sequence[str | PathLike]): one pattern or path, or a list of
            them (each may itself be a pattern).
        storage_options (dict | None): fsspec options, for globs over URLs.

    Returns:
        list[str]: the shards, each once.

    Raises:
        ConfigError: no sources; a glob matching nothing (named); a shard named twice (named,
            with both positions); an entry that is not a str or path.

    Example:
        >>> expand_sources(["a.jsonl", "b-{1..2}.jsonl"])
        ['a.jsonl', 'b-1.jsonl', 'b-2.jsonl']
        >>> expand_sources(["a.tar", "b.tar", "a.tar"])
        Traceback (most recent call last):
        ...
        clorch_nb.errors.ConfigError: shard 'a.tar' is listed twice (positions 0 and 2)...
    """
    items = [sources] if isinstance(sources, str | os.PathLike) else sources
    if isinstance(items, bytes) or not isinstance(items, Sequence):
        raise ConfigError(
            f"sources={sources!r:.80} must be a path, a URL, a glob, a brace pattern or a list "
            "of them"
        )
    out: list[str] = []
    for entry in items:
        if not isinstance(entry, str | os.PathLike):
            raise ConfigError(
                f"sources has an entry {entry!r:.60} of type {type(entry).__name__}; each must "
                "be a path or URL string"
            )
        literal = os.fspath(entry)
        has_pattern = _BRACE.search(literal) or _GLOB_CHARS.search(literal.split("://", 1)[-1])
        if has_pattern and _exists_as_named(literal, storage_options or {}):
            out.append(literal)  # an existing file's name is the file, never a pattern
            continue
        for name in expand_braces(literal):
            if _GLOB_CHARS.search(name.split("://", 1)[-1]) and not _exists_as_named(
                name, storage_options or {}
            ):
                matched = _glob_one(name, storage_options or {})
                if not matched:
                    raise ConfigError(f"sources glob {name!r} matches no file; check the path")
                out.extend(matched)
            else:
                out.append(name)
    if not out:
        raise ConfigError("sources is empty; pass at least one shard path, URL or pattern")
    _refuse_duplicates(out)
    return out


def _refuse_duplicates(names: list[str]) -> None:
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        key = name if is_url(name) else os.path.abspath(os.path.expanduser(name))
        if key in first:
            raise ConfigError(
                f"shard {name!r} is listed twice (positions {first[key]} and {i}); each shard "
                "must appear once, or its items would be read twice an epoch. Remove the repeat"
            )
        first[key] = i
