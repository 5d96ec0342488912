"""MinIO on loopback for a table run, and toxiproxy in front of it where latency decides: started from the
binaries `xarray_zarrmax.testing` finds (``bash ci/install_services.sh`` installs them), stopped on exit.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

HINT = "run `bash ci/install_services.sh`"


@dataclass(frozen=True)
class Services:
    """A MinIO server (`xarray_zarrmax.testing.MinioServer`) and the endpoint to read it through: its own, or
    that of a toxiproxy proxy in front of it adding latency to every response."""

    minio: Any
    endpoint: str
    proxy: Any = None

    def storage_options(self) -> dict[str, Any]:
        """What engine="zarrmax" and `xarray_zarrmax.to_zarr` take to reach MinIO through ``endpoint``."""
        return dict(self.minio.storage_options(self.endpoint))


@contextlib.contextmanager
def running(*, proxy: bool = False, latency_ms: int = 0) -> Iterator[Services | None]:
    """MinIO, and with ``proxy`` a toxiproxy proxy in front of it adding ``latency_ms`` to each response (none
    for 0), all stopped (and MinIO's data removed) on exit. None, with a hint on stderr, when a binary is not
    installed."""
    from xarray_zarrmax.testing import MinioServer, Toxiproxy, minio_binary, toxiproxy_binaries

    binary = minio_binary()
    toxi = toxiproxy_binaries() if proxy else None
    if binary is None or (proxy and toxi is None):
        print(f"{'MinIO/toxiproxy' if proxy else 'MinIO'} not found: {HINT}", file=sys.stderr)
        yield None
        return
    minio = MinioServer(binary).start()
    toxiproxy = None
    try:
        if toxi is None:
            yield Services(minio, str(minio.endpoint))
            return
        toxiproxy = Toxiproxy(toxi[0]).start()
        endpoint = toxiproxy.proxy("s3", minio.port)
        if latency_ms:
            toxiproxy.add_toxic("s3", "latency", latency=latency_ms)
        yield Services(minio, endpoint, toxiproxy)
    finally:
        if toxiproxy is not None:
            toxiproxy.stop()
        minio.close()
