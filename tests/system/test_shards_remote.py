"""Shards in object storage, for real: an S3 endpoint on 127.0.0.1 (moto's server mode, started
by a fixture and stopped after) and an HTTP server on 127.0.0.1 that honours Range requests and
can fail on purpose (transient 503s are retried; a missing object is named)."""

from __future__ import annotations

import http.server
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from clorch_nb.data.shards import shard_dataset
from clorch_nb.errors import ShardError
from tests.shard_fixtures import cls_of, numbered_jsonl, numbered_tars

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Any:
    """A moto S3 server with bucket ``shards`` holding 3 tars (2, 0, 3 items) and 2 JSONL."""
    moto_server = pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    opts = {"key": "testing", "secret": "testing", "endpoint_url": f"http://127.0.0.1:{port}",
            "client_kwargs": {"region_name": "us-east-1"}}  # fmt: skip
    boto3 = pytest.importorskip("boto3")
    boto3.client("s3", region_name="us-east-1", endpoint_url=opts["endpoint_url"],
                 aws_access_key_id="testing", aws_secret_access_key="testing",
                 ).create_bucket(Bucket="shards")  # fmt: skip
    fs = s3fs.S3FileSystem(**opts)
    local = tmp_path_factory.mktemp("s3src")
    for p in numbered_tars(local, [2, 0, 3]) + numbered_jsonl(local, [4, 1]):
        fs.put_file(str(p), f"shards/{p.name}")
    try:
        yield opts
    finally:
        server.stop()


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder with ``Range: bytes=a-b`` and ETags; the first ``fail`` GETs of a path
    whose name contains ``flaky`` answer 503."""

    failures: dict[str, int] = {}
    fail = 2

    def log_message(self, *args: Any) -> None:
        pass

    def send_head(self) -> Any:
        if "flaky" in self.path and self.command == "GET":
            n = self.failures.get(self.path, 0)
            if n < self.fail:
                self.failures[self.path] = n + 1
                self.send_error(503, "try again")
                return None
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404, "no such shard")
            return None
        blob = path.read_bytes()
        rng = self.headers.get("Range")
        if rng and self.command == "GET":
            a, _, b = rng.removeprefix("bytes=").partition("-")
            start, end = int(a), min(int(b) if b else len(blob) - 1, len(blob) - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(blob)}")
            body = blob[start : end + 1]
        else:
            self.send_response(200)
            body = blob
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{len(blob)}-{int(path.stat().st_mtime_ns)}"')
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        import io

        return io.BytesIO(body)


@pytest.fixture(scope="module")
def http_root(tmp_path_factory) -> Any:
    root = tmp_path_factory.mktemp("www")
    numbered_tars(root, [3, 2])
    (root / "flaky.jsonl").write_text('{"i": 0}\n{"i": 1}\n')

    def handler(*a: Any, **k: Any) -> Any:
        return _RangeHandler(*a, directory=str(root), **k)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", _free_port()), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="test-http", daemon=True)
    thread.start()
    import fsspec.asyn

    fsspec.asyn.get_loop()  # fsspec's IO thread lives for the session: start it before the tests
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_s3_tars_by_glob_counted_and_read(s3, tmp_path: Path) -> None:
    ds = shard_dataset("s3://shards/shard-*.tar", storage_options=s3, transform=cls_of,
                       cache_dir=tmp_path, progress=False)  # fmt: skip
    assert ds.paths == tuple(f"s3://shards/shard-{k:05d}.tar" for k in range(3))
    assert ds.counts == (2, 0, 3)
    assert ds.get_items([4, 0, 3]) == [4, 0, 3]
    ident = ds.index.identities[0]
    assert ident["etag"] and ident["size"] == 10240  # tarfile pads a tar to a 10240-byte record


def test_s3_brace_pattern_jsonl(s3, tmp_path: Path) -> None:
    ds = shard_dataset("s3://shards/part-{00000..00001}.jsonl", storage_options=s3,
                       cache_dir=tmp_path, progress=False)  # fmt: skip
    assert [ds.get_item(i)["i"] for i in range(ds.get_size())] == [0, 1, 2, 3, 4]


def test_s3_missing_object_names_the_url(s3, tmp_path: Path) -> None:
    with pytest.raises(ShardError, match=r"shard 's3://shards/nope.tar' cannot be read") as e:
        shard_dataset("s3://shards/nope.tar", storage_options=s3, cache_dir=tmp_path,
                      progress=False)  # fmt: skip
    assert e.value.shard == "s3://shards/nope.tar"


def test_http_tars_read_by_range(http_root, tmp_path: Path) -> None:
    urls = [f"{http_root}/shard-{k:05d}.tar" for k in range(2)]
    ds = shard_dataset(urls, transform=cls_of, cache_dir=tmp_path, progress=False)
    assert ds.counts == (3, 2)
    assert ds.get_items([4, 1, 2]) == [4, 1, 2]


def test_http_transient_errors_are_retried_with_backoff(http_root, tmp_path: Path) -> None:
    _RangeHandler.failures.clear()
    ds = shard_dataset(f"{http_root}/flaky.jsonl", cache_dir=tmp_path, progress=False,
                       retries=3)  # fmt: skip
    assert ds.get_items([1, 0]) == [{"i": 1}, {"i": 0}]
    assert max(_RangeHandler.failures.values()) == 2


def test_http_transient_errors_past_the_retries_name_the_url(http_root, tmp_path) -> None:
    _RangeHandler.failures.clear()
    url = f"{http_root}/flaky.jsonl"
    with pytest.raises(ShardError, match=r"flaky.jsonl' could not be read after 2 attempts"):
        shard_dataset(url, cache_dir=tmp_path, progress=False, retries=1)


def test_http_missing_shard_names_the_url(http_root, tmp_path: Path) -> None:
    with pytest.raises(ShardError, match=r"shard 'http://127.0.0.1:\d+/gone.tar' cannot be read"):
        shard_dataset(f"{http_root}/gone.tar", cache_dir=tmp_path, progress=False)


@pytest.mark.slow  # process workers reading from a moto S3 server
@pytest.mark.timeout(180)
def test_s3_shards_through_process_workers_exactly_once(s3, tmp_path: Path) -> None:
    from clorch_nb import data

    ds = shard_dataset("s3://shards/shard-{00000..00002}.tar", storage_options=s3,
                       transform=cls_of, cache_dir=tmp_path, progress=False)  # fmt: skip
    got = []
    for r in range(2):
        s = data.distributed_sampler(ds, num_replicas=2, rank=r, seed=0)
        with data.dataloader(ds, batch_size=2, sampler=s, num_workers=2,
                             worker_backend="process", timeout_ms=60_000) as loader:  # fmt: skip
            got.append([i for b in loader for i in b])
    assert len(got[0]) == len(got[1]) == 3  # 5 items on 2 ranks: 3 each, one padding repeat
    assert set(got[0]) | set(got[1]) == set(range(5))
