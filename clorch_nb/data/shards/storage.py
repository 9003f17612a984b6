"""Where shard bytes come from: the local disk, or any fsspec URL (``s3://``, ``http(s)://``,
``memory://``, ``file://``), read in bounded time with retries.

Three operations, all a reader needs: :meth:`Storage.identity` (size + mtime or ETag: what the
index keys a count on), :meth:`Storage.read_range` (bytes ``[start, end)``: a seek to an item),
and :meth:`Storage.open` (a sequential stream, for counting and for formats that cannot seek).

Failures are sorted in two: *permanent* (missing object, no permission) raise
:class:`~clorch_nb.errors.ShardError` at once, naming the URL; *transient* (a connection reset,
a timeout, a 5xx from the server) are retried ``retries`` times with exponential backoff
(``backoff_s * 2**attempt``), then raise naming the URL and the last cause. Each attempt is
bounded by ``timeout_s``: passed to the network client (s3fs ``connect_timeout`` /
``read_timeout``, aiohttp ``ClientTimeout`` for HTTP, added to any ``client_kwargs`` such as
headers) unless ``storage_options`` sets the client's own. A server that ignores ``Range`` and
sends the whole object is read correctly (the range is cut from it; a warning names the server).
fsspec is imported only for a URL: local shards need no extra.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

from clorch_nb._warn import warn_user
from clorch_nb.data.shards.sources import is_url
from clorch_nb.errors import ConfigError, ShardError

__all__ = ["Storage", "is_transient"]

T = TypeVar("T")

#: fsspec protocols whose files live in the memory of the interpreter that wrote them (fsspec's
#: memory filesystem is one store per process): another process, a process worker, sees none
PROCESS_LOCAL_PROTOCOLS = frozenset({"memory"})

_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
_NETWORK_MODULES = ("aiohttp", "botocore", "urllib3", "requests", "http.client")


def is_transient(exc: BaseException) -> bool:
    """True for an error worth retrying: a timeout, a dropped connection, a server error from a
    network client; False for a missing object, no permission, or an error in our own code.

    Example:
        >>> is_transient(ConnectionResetError()), is_transient(FileNotFoundError("x"))
        (True, False)
    """
    if isinstance(exc, _PERMANENT):
        # fsspec's HTTP info() reports any failure, a timeout too, as FileNotFoundError(url)
        # raised from it: the cause says which it was
        cause = exc.__cause__
        return isinstance(cause, Exception) and cause is not exc and is_transient(cause)
    status = getattr(exc, "status", None)  # an HTTP status: 4xx is the request's fault
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        return False
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    module = type(exc).__module__ or ""
    if module.startswith(_NETWORK_MODULES):
        return True
    return isinstance(exc, OSError) and not isinstance(exc, ShardError)


@dataclass(frozen=True)
class Storage:
    """How to reach shards: fsspec options plus the time bound and retry policy.

    Args:
        storage_options (dict): passed to fsspec for URLs (``{"anon": True}``,
            ``{"endpoint_url": ...}``, credentials); plain data, so process workers rebuild it.
        timeout_s (float): per-attempt bound of a network read, in seconds.
        retries (int): attempts after the first on a transient error.
        backoff_s (float): the first retry's wait; doubles on each retry.

    Raises:
        ConfigError: a negative ``retries`` or a non-positive ``timeout_s``/``backoff_s``.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"; _ = p.write_bytes(b"0123456789")
        >>> Storage().read_range(str(p), 2, 5)
        b'234'
    """

    storage_options: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.2

    def __post_init__(self) -> None:
        if not isinstance(self.storage_options, dict):
            raise ConfigError(
                f"storage_options={self.storage_options!r:.60} must be a dict of fsspec options"
            )
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigError(f"retries={self.retries!r} must be an int >= 0")
        for name in ("timeout_s", "backoff_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name}={value!r} must be a number of seconds > 0")

    def remote(self, paths: tuple[str, ...] | list[str]) -> bool:
        """True when any of ``paths`` is a URL (read over a network, where each request costs
        milliseconds: readers then fetch whole blocks, not batch spans).

        Example:
            >>> Storage().remote(["a.tar", "s3://b/c.tar"]), Storage().remote(["a.tar"])
            (True, False)
        """
        return any(is_url(p) for p in paths)

    def process_local(self, paths: tuple[str, ...] | list[str]) -> str | None:
        """Why another process cannot read ``paths`` (the first shard on a filesystem that
        lives in this interpreter's memory, ``memory://``), or None when any process can.

        Example:
            >>> Storage().process_local(["memory://b/a.jsonl"])[:39]
            "shard 'memory://b/a.jsonl' is on fsspec"
            >>> Storage().process_local(["a.tar", "s3://b/c.tar"]) is None
            True
        """
        for p in paths:
            if is_url(p) and p.split("://", 1)[0].lower() in PROCESS_LOCAL_PROTOCOLS:
                return (
                    f"shard {p!r} is on fsspec's memory filesystem, which exists only in the "
                    "process that wrote it (a worker process would find no such file)"
                )
        return None

    # -- the three operations -------------------------------------------------------------------

    def identity(self, path: str) -> dict[str, Any]:
        """``{"size": bytes, "mtime": float | None, "etag": str | None}`` of a shard: what
        changes when the shard is rewritten.

        Raises:
            ShardError: the shard is missing or unreadable (names it).
        """
        if not is_url(path):
            st = self.retry(path, lambda: os.stat(os.path.expanduser(path)))
            return {"size": int(st.st_size), "mtime": float(st.st_mtime), "etag": None}
        info = self.retry(path, lambda: self._fs(path).info(path))
        etag = info.get("ETag") or info.get("etag")
        mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
        if mtime is not None and not isinstance(mtime, int | float):
            mtime = str(mtime)
        return {"size": int(info.get("size") or 0), "mtime": mtime, "etag": etag}

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a shard (one ranged GET for a URL, one seek locally).

        Raises:
            ShardError: missing, unreadable, or fewer bytes than asked (names the shard).
        """
        if end <= start:
            return b""
        if is_url(path):
            data = self.retry(path, lambda: self._fs(path).cat_file(path, start=start, end=end))
            if len(data) > end - start:  # more than asked: the server ignored the Range header
                data = _whole_object_range(path, data, start, end)
        else:
            data = self.retry(path, lambda: _read_local(path, start, end))
        if len(data) != end - start:
            raise ShardError(
                f"shard {path!r} ended after {start + len(data)} bytes while reading bytes "
                f"{start}..{end}: it is shorter than when it was counted (truncated or rewritten)",
                shard=path,
            )
        return bytes(data)

    def open(self, path: str) -> IO[bytes]:
        """A binary stream over the whole shard, for sequential reading.

        Raises:
            ShardError: missing or unreadable (names the shard).
        """
        if not is_url(path):
            return self.retry(path, lambda: open(os.path.expanduser(path), "rb"))
        return self.retry(path, lambda: self._fs(path).open(path, "rb", block_size=1 << 22))

    # -- the machinery --------------------------------------------------------------------------

    def _fs(self, path: str) -> Any:
        try:
            import fsspec
        except ImportError:
            raise ConfigError(
                f"shard {path!r} is a URL, which needs fsspec: pip install 'clorch-nb[remote]'"
            ) from None
        protocol = path.split("://", 1)[0]
        return fsspec.filesystem(protocol, **self._options_for(protocol))

    def _options_for(self, protocol: str) -> dict[str, Any]:
        """``storage_options`` plus our time bound, unless the user set the client's own."""
        opts = dict(self.storage_options)
        if protocol in ("s3", "s3a"):
            cfg = dict(opts.get("config_kwargs", {}))
            cfg.setdefault("connect_timeout", self.timeout_s)
            cfg.setdefault("read_timeout", self.timeout_s)
            opts["config_kwargs"] = cfg
        elif protocol in ("http", "https"):
            # client settings (headers, auth) go in client_kwargs too: keep them, and add the
            # time bound unless the user set the client's own, so a stalled server stays bounded
            client = dict(opts.get("client_kwargs") or {})
            if "timeout" not in client:
                import aiohttp

                client["timeout"] = aiohttp.ClientTimeout(total=self.timeout_s)
            opts["client_kwargs"] = client
        return opts

    def retry(self, path: str, attempt: Callable[[], T]) -> T:
        """``attempt()``, retried on a transient error with backoff (see the module docstring).

        Raises:
            ShardError: a permanent error at once, or a transient one past ``retries``; both
                name ``path``.
        """
        for n in range(self.retries + 1):
            try:
                return attempt()
            except _PERMANENT as exc:
                if is_transient(exc):  # a timeout reported as "not found" (see is_transient)
                    if n == self.retries:
                        raise self._gave_up(path, exc.__cause__ or exc) from exc
                    time.sleep(self.backoff_s * 2**n)
                    continue
                raise ShardError(
                    f"shard {path!r} cannot be read: {type(exc).__name__}: {exc}. Check the path "
                    "or URL and the credentials in storage_options",
                    shard=path,
                ) from exc
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if n == self.retries:
                    raise self._gave_up(path, exc) from exc
                time.sleep(self.backoff_s * 2**n)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _gave_up(self, path: str, exc: BaseException) -> ShardError:
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, TimeoutError) and not str(exc):
            what += f" (no answer within timeout_s={self.timeout_s})"
        return ShardError(
            f"shard {path!r} could not be read after {self.retries + 1} attempts "
            f"(timeout_s={self.timeout_s}); last error: {what}",
            shard=path,
        )


_WARNED_NO_RANGES: set[str] = set()  # servers already named in a warning (one per server)


def _whole_object_range(path: str, data: bytes, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of an answer that is longer than the range asked for: a server
    that ignores ``Range`` sends the whole object from byte 0 (HTTP 200), which is sliced here
    (and the server is named once in a warning: every read downloads the whole shard).

    Raises:
        ShardError: the answer is longer than asked and yet too short to be the whole object
            (names the shard, the range and the length received).
    """
    if len(data) < end:
        raise ShardError(
            f"shard {path!r}: asked for bytes {start}..{end} ({end - start} bytes), the server "
            f"sent {len(data)} bytes, which is neither that range nor the whole object; the "
            "server does not answer Range requests as HTTP defines them",
            shard=path,
        )
    server = path.split("://", 1)[-1].split("/", 1)[0]
    if server not in _WARNED_NO_RANGES:
        _WARNED_NO_RANGES.add(server)
        warn_user(
            f"the server {server!r} ignores HTTP Range requests: reading {path!r} (bytes "
            f"{start}..{end}) returned the whole object ({len(data)} bytes). Items are read "
            "correctly, but every read downloads the whole shard; use a server that supports "
            "Range (most object stores do), or copy the shards locally"
        )
    return bytes(data[start:end])


def _read_local(path: str, start: int, end: int) -> bytes:
    with open(os.path.expanduser(path), "rb") as f:
        f.seek(start)
        return f.read(end - start)
