from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings

from tests.support.compare import s3_oracle
from tests.support.stores import STORE_KINDS, StoreFactory
from tests.support.targets import counter
from xarray_zarrmax.testing import MinioServer, Toxiproxy, minio_binary, toxiproxy_binaries

os.environ.setdefault("ICECHUNK_LOG", "error")  # its per-commit warning about local storage floods the log

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Hypothesis runs are reproducible from the seed ci/test.sh prints (pytest --hypothesis-seed=N). In CI: no example
# database (a fresh clone has none to replay, and writing one is wasted work), the failing example's blob in the
# log, and no shrinking: a failure is reported as found, not after minutes of shrinking per test; rerun it
# locally with the printed seed to get the minimal example.
settings.register_profile("ci", database=None, print_blob=True,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
if IN_CI:
    settings.load_profile("ci")

warnings.filterwarnings("ignore", message=".*consolidated.*", category=RuntimeWarning)


@pytest.fixture(autouse=True)
def empty_chunk_cache() -> Iterator[None]:
    """Every test starts with the process's decoded-chunk cache empty (for the tests that turn it on), so no
    test is served chunks another test decoded."""
    from xarray_zarrmax import clear_cache

    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def no_chunk_cache() -> Iterator[None]:
    """The decoded-chunk cache off: for tests of what the read path itself sends (a read of chunks decoded
    before would otherwise send nothing for them), and of the advisor's model, which costs reads as a cold
    cache does."""
    from xarray_zarrmax import set_config

    with set_config(cache_bytes=0):
        yield


def _missing(what: str) -> None:
    message = f"{what} not found: run `bash ci/install_services.sh` (the README's test command does)"
    if IN_CI:
        pytest.fail(message)  # in CI a missing service is a failure, never a skip
    pytest.skip(message)


@pytest.fixture(scope="session")
def minio() -> Iterator[MinioServer]:
    binary = minio_binary()
    if binary is None:
        _missing("the MinIO binary")
    server = MinioServer(binary).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def bucket(minio: MinioServer) -> str:
    return minio.make_bucket("zarrmax-tests")


@pytest.fixture(scope="session")
def toxiproxy() -> Iterator[Toxiproxy]:
    found = toxiproxy_binaries()
    if found is None:
        _missing("the toxiproxy binaries")
    proxy = Toxiproxy(found[0]).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="session")
def session_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stores")


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, session_tmp: Path) -> StoreFactory:
    kind = request.param
    if kind.startswith("icechunk"):
        pytest.importorskip("icechunk")
    if "minio" in kind:
        server = request.getfixturevalue("minio")
        return StoreFactory(kind, session_tmp, server, request.getfixturevalue("bucket"))
    return StoreFactory(kind, session_tmp)


@pytest.fixture(params=["local", "minio"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """A fresh write target, a local directory or an s3:// URL on MinIO: ``target`` is what to_zarr writes to
    (with the keywords in ``write``: tests.support.targets.write passes them), ``read`` what the readers open
    with ``kwargs`` (tests.support.compare.check_reads takes them, ``oracle`` included)."""
    if request.param == "local":
        path = str(tmp_path / "out.zarr")
        return {"target": path, "read": path, "kwargs": {}}
    minio: MinioServer = request.getfixturevalue("minio")
    bucket = request.getfixturevalue("bucket")
    url = f"s3://{bucket}/w{next(counter)}.zarr"
    so = minio.storage_options()
    return {"target": url, "read": url, "kwargs": {"storage_options": so, "oracle": s3_oracle(minio, url)},
            "write": {"storage_options": so}}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("store_factory") if callspec else None
        if kind and "minio" in kind:
            item.add_marker(pytest.mark.s3)
        if kind and kind.startswith("icechunk"):
            item.add_marker(pytest.mark.icechunk)
