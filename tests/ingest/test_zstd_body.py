"""POST /api/v1/snapshots with `Content-Encoding: zstd` (one frame): taken as a gzip body is,
within the same byte limit; a frame that is truncated, corrupt, followed by anything, too big
(declared or not) or needing a large window is refused with a clear reason and stores nothing."""

from __future__ import annotations

import json

import pytest
import zstandard

from ctxobs.wire import LIMITS
from ingest.api import ZSTD_MAX_WINDOW
from ingest.models import Snapshot
from tests.factories import snapshot

pytestmark = pytest.mark.django_db


def _post(api, packed: bytes):
    return api.client.post("/api/v1/snapshots", data=packed, content_type="application/json",
                           HTTP_CONTENT_ENCODING="zstd", **api.headers())


def _batch(n: int = 2) -> bytes:
    return json.dumps({"snapshots": [snapshot(turn=i) for i in range(n)]}).encode()


def _streamed(raw: bytes, **params: int) -> bytes:
    """RAW as one frame written by a stream compressor: no content size in its header."""
    cctx = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters.from_level(3, **params)
    ) if params else zstandard.ZstdCompressor(level=3)
    obj = cctx.compressobj()
    return obj.compress(raw) + obj.flush()


def test_a_zstd_batch_is_stored(api, project):
    r = _post(api, zstandard.ZstdCompressor(level=3, write_checksum=True).compress(_batch()))
    assert r.status_code == 200, r.content
    assert r.json()["created"] == 2
    assert Snapshot.objects.filter(project=project).count() == 2


def test_a_frame_without_its_size_in_the_header_is_stored(api, project):
    packed = _streamed(_batch(3))
    assert zstandard.get_frame_parameters(packed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    r = _post(api, packed)
    assert r.status_code == 200, r.content
    assert Snapshot.objects.filter(project=project).count() == 3


def test_a_declared_size_over_the_limit_is_413_before_decompressing(api, project):
    raw = b'{"snapshots": [], "pad": "' + b" " * LIMITS.max_body_bytes + b'"}'
    packed = zstandard.ZstdCompressor(level=3).compress(raw)
    assert len(packed) < 10_000
    assert zstandard.get_frame_parameters(packed).content_size == len(raw)
    r = _post(api, packed)
    assert r.status_code == 413
    assert r.json()["detail"] == (f"decompressed body of {len(raw)} bytes exceeds the limit "
                                  f"max_body_bytes={LIMITS.max_body_bytes}")


def test_an_undeclared_size_over_the_limit_is_413(api, project):
    raw = b'{"snapshots": [], "pad": "' + b" " * LIMITS.max_body_bytes + b'"}'
    r = _post(api, _streamed(raw))
    assert r.status_code == 413
    assert "decompressed body exceeds the limit max_body_bytes" in r.json()["detail"]
    # At the limit exactly it is read (and is a valid, empty batch).
    at = b'{"snapshots": [], "pad": "' + b" " * (LIMITS.max_body_bytes - 28) + b'"}'
    assert len(at) == LIMITS.max_body_bytes
    assert _post(api, _streamed(at)).status_code == 200


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda p: p[: len(p) // 2], id="truncated"),
        pytest.param(lambda p: p[:-2], id="checksum-cut"),
        pytest.param(lambda p: p[:-1] + bytes([p[-1] ^ 0xFF]), id="checksum-wrong"),
        pytest.param(lambda p: p + p, id="a-second-frame"),
        pytest.param(lambda p: p + b"\0" * 8, id="zero-padding"),
        pytest.param(lambda p: p + b"garbage", id="garbage-after"),
        pytest.param(lambda p: b"not zstd at all", id="not-zstd"),
        pytest.param(lambda p: b"", id="empty"),
        pytest.param(lambda p: b"\x28\xb5\x2f\xfd", id="magic-only"),
        pytest.param(lambda p: zstandard.ZstdCompressor().compress(b"") + p, id="after-an-empty-frame"),
        pytest.param(lambda p: _streamed(b"") + p, id="after-an-empty-frame-of-no-declared-size"),
    ],
)
def test_a_bad_frame_is_400_and_stores_nothing(api, project, tamper):
    packed = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(_batch())
    r = _post(api, tamper(packed))
    assert r.status_code == 400, r.content
    assert r.json()["detail"].startswith("body is not valid zstd")
    assert not Snapshot.objects.filter(project=project).exists()


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda p: p[: len(p) // 2], id="truncated"),
        pytest.param(lambda p: p[:20] + bytes(b ^ 0x5A for b in p[20:]), id="scrambled"),
    ],
)
def test_a_bad_frame_without_its_size_is_400_not_413(api, project, tamper):
    r = _post(api, tamper(_streamed(_batch())))
    assert r.status_code == 400, r.content
    assert r.json()["detail"].startswith("body is not valid zstd")
    assert not Snapshot.objects.filter(project=project).exists()


def test_a_frame_needing_a_window_over_the_bound_is_400(api, project):
    packed = _streamed(_batch(), window_log=24)
    assert zstandard.get_frame_parameters(packed).window_size > ZSTD_MAX_WINDOW
    r = _post(api, packed)
    assert r.status_code == 400
    assert f"exceeds {ZSTD_MAX_WINDOW}" in r.json()["detail"]
    assert not Snapshot.objects.filter(project=project).exists()
    # The same batch in a frame within the bound is stored.
    assert _post(api, _streamed(_batch(), window_log=22)).status_code == 200


def test_another_encoding_is_415_and_names_those_taken(api):
    r = api.client.post("/api/v1/snapshots", data=_batch(), content_type="application/json",
                        HTTP_CONTENT_ENCODING="br", **api.headers())
    assert r.status_code == 415
    assert r.json()["detail"] == "unsupported Content-Encoding 'br': send zstd, gzip or none"
