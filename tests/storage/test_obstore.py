"""obstore stores, both directions: the source and sink contracts (`xarray_zarrmax.testing.storage`) for S3 on MinIO,
and for obstore's in-memory and local stores (no server needed)."""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import obstore
import pytest
from obstore.store import LocalStore, MemoryStore

from xarray_zarrmax.core.loop import run_sync
from xarray_zarrmax.errors import RequestFailed
from xarray_zarrmax.storage import ObstoreSink, ObstoreSource, Sink, s3_store_from_url
from xarray_zarrmax.testing import SECRET_KEY, MinioServer
from xarray_zarrmax.testing.storage import SinkTests, SourceTests

WRONG_SECRET = "S3CRET-not-the-key-8731"


class ObstoreBehaviour:
    """Where obstore stores differ from the common case."""

    #: A range starting at or after the end: the store answers 416, or object_store refuses it before sending.
    after_the_end = RequestFailed
    #: object_store refuses to parse such a path: nothing is sent.
    outside_key = RequestFailed

    def write(self, source: Any, key: str, data: bytes) -> None:
        obstore.put(source.store, key, data)

    def remove(self, source: Any, key: str) -> None:
        obstore.delete(source.store, key)


def put_if(sink: Any, key: str, data: bytes, version: Hashable | None) -> None:
    run_sync(sink.put_async(key, data, "create" if version is None else {"e_tag": version}))


# -- without a server --------------------------------------------------------------------------------------------


class TestMemorySource(ObstoreBehaviour, SourceTests):
    empty_objects = False  # object_store's in-memory store refuses the first range of an empty object
    picklable = False  # obstore's MemoryStore is not picklable

    @pytest.fixture
    def source(self) -> ObstoreSource:
        return ObstoreSource(MemoryStore())


class TestLocalStoreSource(ObstoreBehaviour, SourceTests):
    empty_objects = False  # as in memory: "Requested range was invalid"

    @pytest.fixture
    def source(self, tmp_path: Path) -> ObstoreSource:
        return ObstoreSource(LocalStore(tmp_path))


class TestMemorySink(SinkTests):
    picklable = False
    outside_key = RequestFailed  # the read of an update comes first

    @pytest.fixture
    def sink(self) -> ObstoreSink:
        return ObstoreSink(ObstoreSource(MemoryStore()))

    def put_if(self, sink: Sink, key: str, data: bytes, version: Hashable | None) -> None:
        put_if(sink, key, data, version)


# -- S3 on MinIO -----------------------------------------------------------------------------------------------


def _s3(minio: MinioServer, bucket: str, secret: str = SECRET_KEY) -> ObstoreSource:
    """A fresh prefix of the bucket, with the server's credentials (or a wrong secret key)."""
    return s3_store_from_url(f"s3://{bucket}/contract-{uuid.uuid4().hex}",
                             {**minio.storage_options(), "secret_access_key": secret})


@pytest.mark.s3
class TestS3Source(ObstoreBehaviour, SourceTests):
    @pytest.fixture
    def source(self, minio: MinioServer, bucket: str) -> ObstoreSource:
        return _s3(minio, bucket)

    @pytest.fixture
    def secrets(self) -> tuple[str, ...]:
        return SECRET_KEY, WRONG_SECRET

    @pytest.fixture
    def refused_source(self, minio: MinioServer, bucket: str) -> ObstoreSource:
        return _s3(minio, bucket, WRONG_SECRET)


@pytest.mark.s3
class TestS3Sink(SinkTests):
    outside_key = RequestFailed  # the read of an update comes first: object_store refuses the path

    @pytest.fixture
    def sink(self, minio: MinioServer, bucket: str) -> ObstoreSink:
        return ObstoreSink(_s3(minio, bucket))

    def put_if(self, sink: Sink, key: str, data: bytes, version: Hashable | None) -> None:
        put_if(sink, key, data, version)

    @pytest.fixture
    def secrets(self) -> tuple[str, ...]:
        return SECRET_KEY, WRONG_SECRET

    @pytest.fixture
    def refused_sink(self, minio: MinioServer, bucket: str) -> ObstoreSink:
        return ObstoreSink(_s3(minio, bucket, WRONG_SECRET))
