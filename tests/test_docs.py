"""The documentation's code examples, run: so the pages cannot drift from the code.

Every fenced ```python block of the user's pages (README.md, docs/index.md, docs/quickstart.md, docs/guide/*.md)
is one test, run in page order in one namespace per page (a page is read top to bottom: a name defined in one
block is used in the next). ```bash blocks whose every line is a ``zarrmax`` command are run too; other shell
blocks (pip, exports, CI scripts) are not, and are reported as skipped with that reason.

The examples are written for a reader's stores (``s3://bucket/era5.zarr``, ``/data/era5.zarr``, ``so``, ``url``,
``repo``, ``ds``). Each page gets a fresh world that has them: a temporary folder standing in for ``/data``, a
MinIO bucket standing in for ``bucket``, and the names below, built lazily (only the stores the page mentions).
`SUBSTITUTIONS` lists every textual change made to a block before it runs; nothing else is changed. Blocks that
cannot run here are listed in `NOT_RUN` (skipped, with the reason) and blocks known to fail in `KNOWN_FAILURES`
(expected to fail, strictly: one that starts passing fails the run until its entry is removed). The page and
the rules: docs/dev/docs-site.md.

Beside them, cheap checks that what the docs state by hand still holds: the package reports CHANGELOG.md's top
entry, every released section's commit is in asv_bench/releases.txt, and the API reference's table of the
engine's keywords names exactly `OpenOptions`' fields.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import itertools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xarray_zarrmax
from tests.support.devices import TEST_DEVICE, chosen_device
from xarray_zarrmax.testing import ACCESS_KEY, SECRET_KEY

REPO = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/index.md", "docs/quickstart.md", *sorted(
    p.relative_to(REPO).as_posix() for p in (REPO / "docs" / "guide").glob("*.md"))]

#: (pattern, replacement) applied in order to every block before it runs ({bucket}, {root}, {endpoint} are the
#: page's world). The examples name a reader's stores and ERA5's 0.25-degree grid; CI has MinIO and a temporary
#: folder, and a 2.5-degree grid keeps its writes to a few MB.
SUBSTITUTIONS = [
    (r"s3://bucket/", "s3://{bucket}/"),
    (r"(?<=[\"' ])/data/", "{root}/data/"),
    (r"https://s3\.example\.com|https://\.\.\.|http://127\.0\.0\.1:9000", "{endpoint}"),
    (r"\(1, 721, 1440\)", "(1, 73, 144)"),
    (r"\(24, 721, 1440\)", "(24, 73, 144)"),
    # the NumPy stand-in for the GPU unless XARRAY_ZARRMAX_TEST_DEVICE=cuda (tests/support/devices.py)
    (r"device=\"cuda\"", "device=_docs_device"),
]

#: (page, text in the block) -> why the block is not run.
NOT_RUN: dict[tuple[str, str], str] = {}

#: (page, text in the block) -> why the block runs only with XARRAY_ZARRMAX_TEST_DEVICE=cuda (ci/gpu_check.sh sets
#: it on a lent GPU; other ``device="cuda"`` examples run everywhere, on the NumPy stand-in).
GPU_ONLY = {
    ("docs/guide/gpu.md", "LocalCUDACluster"): "needs dask-cuda and a GPU (XARRAY_ZARRMAX_TEST_DEVICE=cuda): "
                                               "ci/gpu_check.sh runs a LocalCUDACluster read on a lent GPU",
}

#: (page, text in the block) -> why it fails as written; strict: a block that passes must leave this list.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}

#: What the page's world holds for each text an example may mention: built only when the page mentions it.
#: Per-page exceptions: `ABSENT` (stores the page writes, so they must not exist before it runs).
ABSENT = {
    "docs/quickstart.md": {"s3-era5"},
    "docs/guide/writing.md": {"s3-era5", "icechunk-data", "url"},
    "docs/guide/layouts.md": {"url"},
}


@dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    """The fenced python and bash blocks of ``page``, in order."""
    found, lines = [], (REPO / page).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, lang = opening.groups()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if lang in ("python", "py", "bash", "sh", "shell"):
            found.append(Block(page, start, "python" if lang in ("python", "py") else "bash", "\n".join(body)))
    return found


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]
LAST_OF_PAGE = {b.page: b.id for b in ALL_BLOCKS}


def _listed(table: dict[tuple[str, str], str], block: Block) -> str | None:
    return next((why for (page, text), why in table.items() if page == block.page and text in block.code), None)


def _shell_commands(block: Block) -> list[list[str]] | None:
    """The ``zarrmax`` commands of a bash block, or None when it holds anything else."""
    commands = []
    for line in block.code.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] not in ("zarrmax", ".venv/bin/zarrmax"):
            return None
        commands.append(words)
    return commands


def _not_run(block: Block) -> str | None:
    """Why ``block`` is not run here, or None."""
    why = _listed(NOT_RUN, block)
    if why is None and TEST_DEVICE != "cuda":
        why = _listed(GPU_ONLY, block)
    if why is None and block.lang == "bash" and _shell_commands(block) is None:
        why = "shell commands other than zarrmax (installs, CI scripts, environment)"
    return why


def _page_text(page: str) -> str:
    return "\n".join(b.code for b in ALL_BLOCKS if b.page == page)


def _needs_minio(page: str) -> bool:
    return re.search(r"s3://|\b(so|url|obstore_store)\b", _page_text(page)) is not None


def _marks(block: Block) -> list[Any]:
    marks = [pytest.mark.s3] if _needs_minio(block.page) else []
    why = _not_run(block)
    if why:
        marks.append(pytest.mark.skip(reason=why))
    failing = _listed(KNOWN_FAILURES, block)
    if failing:
        marks.append(pytest.mark.xfail(reason=failing, strict=True))
    return marks


# -- the world a page's examples run in -----------------------------------------------------------------------


def example_dataset(steps: int = 120) -> xr.Dataset:
    """ERA5's 2 m temperature on a 2.5-degree grid, hourly: the ``ds`` of the examples."""
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {"t2m": (("time", "lat", "lon"), rng.normal(280, 10, (steps, 73, 144)).astype("float32"),
                 {"units": "K", "long_name": "2 metre temperature"})},
        coords={"time": pd.date_range("2026-01-01", periods=steps, freq="h"),
                "lat": np.linspace(90, -90, 73), "lon": np.arange(0, 360, 2.5)},
        attrs={"title": "ERA5-like example"},
    )


ENCODING = {"t2m": {"chunks": (1, 73, 144), "shards": (24, 73, 144)}}


class _Setting:
    """A page example's `set_config` call. One called alone stays in force for the page's later blocks (as for a
    reader), but only while the page's block runs: withdrawn after each, made again before the next, so no other
    test in the process runs under it."""

    def __init__(self, changes: dict[str, Any]) -> None:
        self.changes, self.open = changes, True
        self.change: Any = _SET_CONFIG(**changes)

    def __enter__(self) -> Any:
        return self.change.__enter__()

    def __exit__(self, *exc_info: object) -> None:
        self.open = False  # its with block ended: not made again
        self.change.__exit__(*exc_info)

    def withdraw(self) -> None:
        self.change.__exit__(None, None, None)

    def again(self) -> None:
        if self.open:
            self.change = _SET_CONFIG(**self.changes)


_SET_CONFIG = xarray_zarrmax.set_config


@dataclass
class World:
    page: str
    root: Path
    bucket: str | None = None
    minio: Any = None
    namespace: dict[str, Any] = field(default_factory=dict)
    built: set[str] = field(default_factory=set)
    ran: set[str] = field(default_factory=set)  # the page's blocks run in this world, in order
    closed: bool = False
    settings: list[_Setting] = field(default_factory=list)  # its examples' set_config calls

    @property
    def endpoint(self) -> str:
        return self.minio.endpoint if self.minio is not None else "http://127.0.0.1:9"

    def env(self) -> dict[str, str]:
        """Credentials for examples that take them from the environment, as a reader's machine has them."""
        if self.minio is None:
            return {}
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.minio.endpoint, "AWS_ALLOW_HTTP": "true"}

    def substitute(self, code: str) -> str:
        for pattern, replacement in SUBSTITUTIONS:
            code = re.sub(pattern, replacement.format(bucket=self.bucket, root=self.root, endpoint=self.endpoint),
                          code)
        return code

    @property
    def so(self) -> dict[str, Any]:
        return self.minio.storage_options()

    def s3(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    def upload(self, local: Path, prefix: str) -> None:
        import obstore

        store = self.minio.obstore(self.bucket, prefix)
        for path in sorted(local.rglob("*")):
            if path.is_file():
                obstore.put(store, path.relative_to(local).as_posix(), path.read_bytes())

    def build(self, text: str) -> None:
        """Make what ``text`` (a page's examples, substituted) mentions and this world lacks."""
        absent = ABSENT.get(self.page, set())
        ns = self.namespace
        full = example_dataset()
        wants = {
            "local-era5": f"{self.root}/data/era5.zarr" in text,
            "local-runs": f"{self.root}/data/run-" in text,
            "local-multiscale": f"{self.root}/data/multiscale.zarr" in text,
            "s3-era5": f"s3://{self.bucket}/era5.zarr" in text or re.search(r"\b(url|obstore_store)\b", text),
            "s3-runs": f"s3://{self.bucket}/run-" in text,
            "s3-hierarchy": f"s3://{self.bucket}/hierarchy.zarr" in text,
            "s3-cube": f"s3://{self.bucket}/cube.zarr" in text,
            "memory": "memory://x.zarr" in text,
            "icechunk": re.search(r"\brepo\b", text),
        }
        for what in [w for w, wanted in wants.items() if wanted and w not in self.built and w not in absent]:
            self.built.add(what)
            if what == "local-era5":
                xarray_zarrmax.to_zarr(full.isel(time=slice(0, 96)).chunk({"time": 24}),
                                       str(self.root / "data" / "era5.zarr"), encoding=ENCODING)
            elif what == "local-runs":  # an ensemble: the same 24 hours, one store per run
                for run in range(2):
                    (full.isel(time=slice(0, 24)) + run).to_zarr(self.root / "data" / f"run-{run}.zarr",
                                                                 zarr_format=3, consolidated=True)
            elif what == "local-multiscale":
                self._tree().to_zarr(self.root / "data" / "multiscale.zarr", zarr_format=3)
            elif what == "s3-era5":
                xarray_zarrmax.to_zarr(full.isel(time=slice(0, 96)).chunk({"time": 24}), self.s3("era5.zarr"),
                                       encoding=ENCODING, storage_options=self.so)
            elif what == "s3-runs":
                for run in range(2):
                    xarray_zarrmax.to_zarr(full.isel(time=slice(0, 24)) + run, self.s3(f"run-{run}.zarr"),
                                           storage_options=self.so, consolidated=True)
            elif what == "s3-hierarchy":
                local = self.root / "staging" / "hierarchy.zarr"
                self._tree().to_zarr(local, zarr_format=3)
                self.upload(local, "hierarchy.zarr")
            elif what == "s3-cube":
                cube = xr.Dataset({"t": full["t2m"].rename({"lat": "y", "lon": "x"}).drop_vars(["y", "x"])})
                xarray_zarrmax.to_zarr(cube.chunk({"time": 24}), self.s3("cube.zarr"), storage_options=self.so,
                                       encoding={"t": ENCODING["t2m"]})
            elif what == "memory":
                import fsspec

                memory = fsspec.filesystem("memory")
                if memory.exists("/x.zarr"):
                    memory.rm("/x.zarr", recursive=True)
                full.isel(time=slice(0, 24)).to_zarr("memory://x.zarr", zarr_format=3, consolidated=True)
            elif what == "icechunk":
                import icechunk

                repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(self.root / "icechunk")))
                if "icechunk-data" not in absent:
                    session = repo.writable_session("main")
                    xarray_zarrmax.to_zarr(full.isel(time=slice(0, 48)), session, encoding=ENCODING)
                    session.commit("example data")
                ns["repo"] = repo
        if wants["s3-era5"] and self.minio is not None:
            from obstore.store import S3Store

            ns.setdefault("obstore_store", S3Store(self.bucket, prefix="era5.zarr", client_options={"allow_http": True},
                                                   **self.so))
        if self.minio is not None:
            ns.setdefault("so", self.so)
            ns.setdefault("url", self.s3("out.zarr" if "url" in absent else "era5.zarr"))

    @staticmethod
    def _tree() -> xr.DataTree:
        """A small hierarchy: two resolutions side by side, and a statistics group below the first."""
        full = example_dataset(24)
        coarse = full.coarsen(lat=2, lon=2, boundary="trim").mean()
        stats = xr.Dataset({"t2m_mean": full["t2m"].mean(("lat", "lon"))})
        return xr.DataTree.from_dict({"/": xr.Dataset(attrs={"title": "example hierarchy"}), "/0": full,
                                      "/1": coarse, "/0/stats": stats})

    def close(self) -> None:
        """Stop what the page's examples started (a distributed client and its cluster), and withdraw the settings
        they changed."""
        self.closed = True
        for setting in self.settings:
            setting.withdraw()
        for value in list(self.namespace.values()):
            kind = type(value).__module__
            if kind.startswith("distributed"):
                cluster = getattr(value, "cluster", None)
                for thing in (value, cluster):
                    close = getattr(thing, "close", None)
                    if callable(close):
                        try:
                            close()
                        except Exception:  # noqa: BLE001 - closing what an example left running
                            pass


_WORLDS: dict[str, World] = {}

#: Each world's bucket is its own: a page run again afresh in one process (its blocks stolen out of order by
#: another worker, `--dist worksteal`) would otherwise find its first world's stores, written with mode "w-", there
_BUCKETS = itertools.count()


@pytest.fixture(scope="session")
def _close_worlds() -> Any:
    yield
    for world in _WORLDS.values():
        world.close()
    _WORLDS.clear()


def _world(block: Block, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> World:
    world = _WORLDS.get(block.page)
    if world is None:
        slug = re.sub(r"[^a-z0-9]+", "-", block.page.lower()).strip("-")
        root = tmp_path_factory.mktemp(f"docs-{slug}")
        (root / "data").mkdir()
        world = _WORLDS[block.page] = World(block.page, root)
        text = _page_text(block.page)
        if _needs_minio(block.page):
            world.minio = request.getfixturevalue("minio")
            name = f"docs-{slug.removeprefix('docs-')}"[:56].rstrip("-")
            world.bucket = world.minio.make_bucket(f"{name}-{next(_BUCKETS)}")
        world.namespace.update(xr=xr, np=np, pd=pd, xarray_zarrmax=xarray_zarrmax, ds=example_dataset(96),
                               ds2=example_dataset(120).isel(time=slice(96, 120)),
                               ds3=example_dataset(120).isel(time=slice(100, 110)).drop_vars(["lat", "lon"]),
                               __name__="__docs__")
        if "device=" in text:
            world.namespace["_docs_device"] = chosen_device()
        try:
            world.build(world.substitute(text))
        except BaseException:
            del _WORLDS[block.page]  # each block of the page reports the failure, not a NameError after it
            raise
    return world


def _run_python(code: str, namespace: dict[str, Any], name: str) -> None:
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, namespace))  # a block with a top-level await, as a notebook runs it
    else:
        exec(compiled, namespace)


@pytest.mark.parametrize("block", [pytest.param(b, marks=_marks(b), id=b.id) for b in ALL_BLOCKS])
def test_example(block: Block, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch, _close_worlds: Any) -> None:
    world = _world(block, request, tmp_path_factory)
    if block.id in world.ran or world.closed:  # run out of order in this process: the page afresh
        world.close()
        del _WORLDS[block.page]
        world = _world(block, request, tmp_path_factory)
    for key, value in world.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(world.root)

    def recorded(**changes: Any) -> _Setting:
        world.settings.append(_Setting(changes))
        return world.settings[-1]

    monkeypatch.setattr(xarray_zarrmax, "set_config", recorded)
    before = xarray_zarrmax.get_config()
    for setting in world.settings:
        setting.again()
    try:
        _catch_up(world, block)
        _run_block(block, world)
    finally:
        for setting in world.settings:
            setting.withdraw()
        if LAST_OF_PAGE[block.page] == block.id:
            world.close()
    # no test after it runs under what an example set (the process's settings: every test's)
    assert xarray_zarrmax.get_config() == before, f"{block.id} left the settings changed"


def _catch_up(world: World, block: Block) -> None:
    """Run the blocks of ``block``'s page before it that this process has not run (a page's blocks build on each
    other; the suite's workers share them out), as a reader would have: each that runs here as a passing test."""
    earlier = [b for b in ALL_BLOCKS[:ALL_BLOCKS.index(block)] if b.page == block.page and b.id not in world.ran]
    for before in earlier:
        if _not_run(before) is not None or _listed(KNOWN_FAILURES, before) is not None:
            continue
        try:
            _run_block(before, world)
        except BaseException as exc:
            raise AssertionError(f"{before.id}, run first (this page's blocks build on each other), "
                                 f"failed: {exc!r}") from exc


def _run_block(block: Block, world: World) -> None:
    """Run one example block in its page's ``world`` (python in its namespace; bash: its zarrmax commands)."""
    world.ran.add(block.id)
    code = world.substitute(block.code)
    if block.lang == "python":
        _run_python(code, world.namespace, f"{block.id}")
        return
    zarrmax = str(Path(sys.executable).with_name("zarrmax"))
    for words in _shell_commands(Block(block.page, block.line, "bash", code)) or []:
        done = subprocess.run([zarrmax, *words[1:]], capture_output=True, text=True, timeout=300, env={**os.environ})
        assert done.returncode == 0, f"{' '.join(words)} exited {done.returncode}:\n{done.stderr[-3000:]}"


# -- releases: the version, the changelog and the benchmarks' list of release commits agree ---------------------


def _changelog_releases() -> list[tuple[str, str | None]]:
    """(version, abbreviated commit or None for the unreleased top entry) of each CHANGELOG.md section."""
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    found = []
    for heading in re.finditer(r"^## (\d+\.\d+\.\d+)\b(.*)$", text, re.MULTILINE):
        commit = re.search(r"\bcommit ([0-9a-f]{7,40})\b", heading.group(2))
        found.append((heading.group(1), commit.group(1) if commit else None))
    return found


def test_the_package_reports_the_changelogs_top_entry() -> None:
    releases = _changelog_releases()
    assert releases, "CHANGELOG.md has no '## X.Y.Z' section"
    assert xarray_zarrmax.__version__ == releases[0][0], (
        f"xarray_zarrmax.__version__ is {xarray_zarrmax.__version__}, CHANGELOG.md's top entry {releases[0][0]}")
    versions = [tuple(int(p) for p in v.split(".")) for v, _ in releases]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), (
        f"CHANGELOG.md's sections must be newest first, one per version: {[v for v, _ in releases]}")


def test_every_released_section_names_a_commit_in_the_asv_release_list() -> None:
    hashes = [line.strip() for line in (REPO / "asv_bench" / "releases.txt").read_text().splitlines()
              if line.strip()]
    assert all(re.fullmatch(r"[0-9a-f]{40}", h) for h in hashes), "releases.txt: one full commit hash a line"
    released = [(v, c) for v, c in _changelog_releases() if c is not None]
    assert len(released) == len(hashes), (released, hashes)
    for version, commit in released:
        assert any(h.startswith(commit) for h in hashes), f"{version}'s commit {commit} is not in releases.txt"


def test_the_engines_keyword_table_lists_every_open_option() -> None:
    """docs/api/reading.md's table of the engine's keywords is written by hand (the open methods' signatures are
    made at import, which the generated reference does not see): it must name exactly `OpenOptions`' fields."""
    from dataclasses import fields

    from xarray_zarrmax.backend import OpenOptions

    text = (REPO / "docs" / "api" / "reading.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([^|]+) \|", text.split("| keyword |", 1)[1].split("\n\n", 1)[0], re.MULTILINE)
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row)}
    assert documented == {f.name for f in fields(OpenOptions)}
