"""A soak (issue 46): 2,000 open/read/close cycles of a store with the shard-index cache, the decoded-chunk cache,
conditional reads and the writer in the loop, on local disk and MinIO; after the warm-up, resident memory, open
descriptors, threads and connections stay flat (with margins) and no cache grows, nor past its cap. The cycle
and the checks are `tests.support.soak`'s, which ``python -m asv_bench.tables.soak`` prints as figures
(docs/dev/soak.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import soak

pytest.importorskip("psutil")

pytestmark = pytest.mark.slow

CYCLES = 2000


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> soak.Store:
    if kind == "local":
        return soak.Store("local", str(tmp_path / "soak.zarr"))
    minio = request.getfixturevalue("minio")
    bucket = request.getfixturevalue("bucket")
    return soak.Store("minio", f"s3://{bucket}/soak.zarr", {"storage_options": minio.storage_options()}, minio.port)


@pytest.mark.parametrize("kind", ["local", pytest.param("minio", marks=pytest.mark.s3)])
def test_open_read_write_close_cycles_hold_nothing_more(kind: str, tmp_path: Path,
                                                          request: pytest.FixtureRequest) -> None:
    result = soak.run(_store(kind, tmp_path, request), CYCLES)
    figures = soak.figures(result.samples)
    found = soak.problems(result.samples)
    assert not found, (found, figures)
    assert result.samples[-1].cycle == CYCLES

    # The loop did what it claims, so flat figures mean something. Every rewrite was followed by a read of the
    # same shard that went to the store (neither the index nor the chunks kept from before the rewrite served
    # it) and read the new values: `Soak._read` checks every window against what the store must hold.
    after = result.second_gets[True]
    assert len(after) == CYCLES // soak.REWRITE_EVERY and min(after) >= 1, after
    # Both caches were in use: indexes kept while a Dataset is open, dropped when it is closed; decoded chunks
    # served, evicted to stay under the cap, dropped when their object changed (on MinIO after a conditional
    # request proved the others unchanged).
    assert result.index_kept > 0
    assert figures["index_entries"]["max"] == 0
    counts = result.chunk_counts
    assert counts["hits"] > 0 and counts["evictions"] > 0 and counts["invalidations"] > 0, counts
    if kind == "minio":
        assert counts["revalidations"] > 0, counts
        assert figures["connections"]["max"] >= 1  # the count sees the open store's connections
    else:
        assert figures["pool_mib"]["max"] > 0  # the writer's buffer pool is in the loop
