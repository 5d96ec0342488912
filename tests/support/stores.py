"""Where test data lives: one interface over a local directory, zarr's MemoryStore, MinIO and Icechunk."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_counter = itertools.count()

STORE_KINDS = ("local", "memory", "minio", "icechunk-local", "icechunk-minio")


@dataclass
class Written:
    """A store being written: write through ``store``, then call ``finish`` to get what readers open."""

    kind: str
    store: Any  # a writable zarr Store
    target: Any  # what engine="zarrmax" opens
    open_kwargs: dict[str, Any] = field(default_factory=dict)
    oracle_store: Any = None  # what engine="zarr" opens (zarr-python's reading of the same bytes)
    _session: Any = None
    _repo: Any = None

    def finish(self) -> Written:
        if self._session is not None:
            self._session.commit("test data")
            ro = self._repo.readonly_session("main")
            self.target = ro
            self.oracle_store = ro.store
        return self

    @property
    def snapshots(self) -> bool:
        """Whether what was opened keeps reading the same bytes after a rewrite (an Icechunk snapshot)."""
        return self._repo is not None

    def rewrite(self) -> Any:
        """A store to change the data through; call ``finish`` afterwards. Readers opened before keep their
        ``target``: the same objects (they see the change), or for Icechunk the snapshot they opened."""
        if self._repo is not None:
            self._session = self._repo.writable_session("main")
            self.store = self._session.store
        return self.store


class StoreFactory:
    """Makes fresh stores of one kind (one of ``STORE_KINDS``): ``new()`` gives a `Written` to fill."""

    def __init__(self, kind: str, tmp: Path, minio: Any = None, bucket: str | None = None) -> None:
        self.kind, self.tmp, self.minio, self.bucket = kind, tmp, minio, bucket

    def new(self) -> Written:
        n = next(_counter)
        if self.kind == "local":
            from zarr.storage import LocalStore

            path = self.tmp / f"d{n}.zarr"
            path.mkdir()
            return Written(self.kind, LocalStore(path), str(path), oracle_store=str(path))
        if self.kind == "memory":
            from zarr.storage import MemoryStore

            store = MemoryStore()
            return Written(self.kind, store, store, oracle_store=store)
        if self.kind == "minio":
            from zarr.storage import ObjectStore

            prefix = f"t{n}.zarr"
            store = ObjectStore(self.minio.obstore(self.bucket, prefix))
            return Written(self.kind, store, f"s3://{self.bucket}/{prefix}",
                           {"storage_options": self.minio.storage_options()}, oracle_store=store)
        if self.kind.startswith("icechunk"):
            import icechunk

            if self.kind == "icechunk-local":
                storage = icechunk.local_filesystem_storage(str(self.tmp / f"ic{n}"))
            else:
                storage = icechunk.s3_storage(
                    bucket=self.bucket, prefix=f"ic{n}", region="us-east-1", endpoint_url=self.minio.endpoint,
                    allow_http=True, force_path_style=True, access_key_id=self.minio.storage_options()["access_key_id"],
                    secret_access_key=self.minio.storage_options()["secret_access_key"],
                )
            repo = icechunk.Repository.create(storage)
            session = repo.writable_session("main")
            return Written(self.kind, session.store, None, _session=session, _repo=repo)
        raise ValueError(f"unknown store kind {self.kind!r}")
