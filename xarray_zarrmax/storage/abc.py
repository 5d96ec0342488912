"""What every storage backend implements: `ByteSource` to read, `Sink` to write, and the helpers they share.

A source answers ``get`` (whole object, for metadata), ``get_large`` (a whole data object), ``get_suffix`` /
``get_prefix`` (a shard index), ``get_ranges`` (several byte ranges of one object) and ``list_dir``
(immediate children of a prefix). Missing objects are ``None``, never an exception, so callers can apply fill
values. Every request is counted in `xarray_zarrmax.core.accounting`.

Coherence: data reads return a `Fetched` with the object's *version* (S3 ETag, a local file's fstat, an
Icechunk snapshot). ``get_ranges(..., version=v)`` proves at no extra request that the object is still ``v``
(``If-Match``, or fstat on the descriptor the bytes are read from) and raises `ObjectChanged` otherwise, so a
shard index cached from one version is never applied to the bytes of another.

A sink puts, deletes and read-merge-writes whole objects (`Sink.update`) without losing a concurrent writer's
update; how each backend makes that safe is told in its module. Sources and sinks are picklable (a dask task on
any worker rebuilds its own) and never import xarray.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from xarray_zarrmax.core.bytes import Buffer, Encoded, Segments
from xarray_zarrmax.core.redact import redact, scrubbed
from xarray_zarrmax.errors import CorruptDataError


@dataclass(frozen=True, slots=True)
class Fetched:
    """Bytes of one object and what identifies the object version they came from.

    ``version`` is compared by ``get_ranges`` so later ranges come from the same object version (None: the
    source cannot tell, no check). ``cacheable`` says whether the version may key a cache across reads: it
    must change whenever the object does.
    """

    data: Buffer | Segments
    size: int | None  # the whole object's size, where the store said
    version: Hashable | None
    cacheable: bool


class ByteSource(ABC):
    """Reads of one store; see the module docstring. ``label`` names the store without secrets."""

    label: str
    #: True when reads are plain file reads that need no event loop.
    is_local: bool = False
    #: Values to mask in messages about this store (its credentials); never in a label, repr or pickle.
    _secrets: tuple[str, ...] = ()

    def scrubbed(self, err: BaseException) -> BaseException:
        """``err`` safe to pass on: see `xarray_zarrmax.core.redact.scrubbed`, with this store's credentials."""
        return scrubbed(err, self._secrets)

    @abstractmethod
    async def get(self, key: str) -> Buffer | None:
        """The whole object (metadata), or None if it is missing."""

    @abstractmethod
    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         version: Hashable | None = None) -> list[Buffer] | None:
        """The bytes of each ``(start, stop)`` range, or None if the object is missing.

        With ``version`` (from a `Fetched` of this key), raise `ObjectChanged` unless every range comes from
        that version of the object (a missing object counts as changed).
        """

    @abstractmethod
    async def get_large(self, key: str, max_size: int | None = None) -> Fetched | None:
        """A whole data object, possibly large (a shard): sources that gain from it fetch parallel ranges
        (and return `Segments`; read it with `view`).

        Objects larger than ``max_size`` (what the array's metadata allows) raise `CorruptDataError`.
        """

    @abstractmethod
    async def get_suffix(self, key: str, nbytes: int) -> Fetched | None:
        """The last ``nbytes`` bytes (fewer if the object is smaller)."""

    @abstractmethod
    async def get_prefix(self, key: str, nbytes: int) -> Fetched | None:
        """The first ``nbytes`` bytes (fewer if the object is smaller)."""

    @abstractmethod
    async def list_dir(self, prefix: str) -> list[str]:
        """The names directly under ``prefix``, in the order the store lists them (zarr-python reports a
        group's members in that order)."""

    @property
    def cache_scope(self) -> Hashable | None:
        """What names this store across reads and opens, for the decoded-chunk cache: two sources with the same
        scope must be one store, whose equal keys and versions are equal bytes. None: the source cannot say so
        (its label names a kind of store, not one), and nothing read from it is kept across reads."""
        return self.label

    async def revalidate(self, key: str, version: Hashable) -> bool:
        """Whether ``key`` is still the object version ``version`` (a cacheable `Fetched.version` of it), by the
        cheapest proof the source has: a local ``stat``, an S3 conditional request, an immutable snapshot. The
        decoded-chunk cache uses a kept chunk only when this holds. Sources that cannot tell answer False."""
        del key, version
        return False

    @property
    def supports_consolidated_metadata(self) -> bool:
        """False where the store cannot hold consolidated metadata (Icechunk): ``consolidated=True`` then
        reads the hierarchy itself, as zarr-python and engine="zarr" do."""
        return True

    @abstractmethod
    def zarr_store(self) -> Any:
        """A zarr Store over the same bytes, for arrays that fall back to zarr-python."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"


#: A merge: the stored bytes (None: no object) -> the bytes to store (None: store nothing; only allowed
#: when there was no object, since a missing object cannot be deleted conditionally).
Merge = Callable[[Buffer | None], Encoded | None]


class Update(NamedTuple):
    """One read-merge-write for `Sink.update_many`: the arguments of `Sink.update`."""

    key: str
    merge: Merge
    likely_new: bool = False


class Sink(ABC):
    """Writes to one store; see the module docstring. ``label`` names the store without secrets; sync methods
    are called from dask tasks, async ones from the I/O loop (metadata batches)."""

    label: str
    source: ByteSource  # reads the same objects

    @abstractmethod
    def put(self, key: str, data: Encoded) -> None:
        """Write the whole object: readers see the old object or the new one, never part."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete the object; a missing one is no error."""

    @abstractmethod
    def update(self, key: str, merge: Merge, *, likely_new: bool = False) -> None:
        """Replace the object at ``key`` by ``merge(stored bytes)``, without losing a concurrent update.
        ``likely_new``: the caller expects no object there, so a sink whose reads are round trips may try to
        create it first (``merge(None)``, stored only if the key is still free) and read only if that fails."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix`` ("": the whole store)."""

    def put_many(self, objects: Mapping[str, Encoded]) -> None:
        """Write every object at once (one concurrent batch where the store allows; here: one after another)."""
        for key, data in objects.items():
            self.put(key, data)

    def delete_many(self, keys: Sequence[str]) -> None:
        """Delete every key (one concurrent batch where the store allows); a missing one is no error."""
        for key in keys:
            self.delete(key)

    def update_many(self, updates: Sequence[Update], in_flight: int) -> None:
        """`update` each, up to ``in_flight`` at once where the store's round trips make that worth it (here:
        one after another). Every update runs, also after one fails; then the first failure is raised, its
        key in a note."""
        failures = []
        for update in updates:
            try:
                self.update(update.key, update.merge, likely_new=update.likely_new)
            except Exception as err:
                failures.append(noted(err, update.key))
        if failures:
            raise failures[0]

    #: Whether the target can hold Zarr format 2 groups (`to_zarr` refuses to write into one).
    may_hold_v2 = True

    #: Whether `put` gives an object's pooled buffers back once written (`_buffers`): only then are chunks
    #: encoded into them.
    gives_back_buffers = False

    #: Whether data tasks return something the caller must `collect` (see `task_result`).
    collects = False

    def collect(self, results: list[Any]) -> None:
        """Take back what the data tasks return (`task_result` of each task's sink); nothing by default."""
        return None

    def task_result(self) -> Any:
        """What a data task returns besides its count, for `collect` (an Icechunk fork with its writes, where
        the task ran on a copy of the sink pickled to another process)."""
        return None

    def existing_store(self) -> Any:
        """A read-only zarr Store over what the target holds now, or None where it holds nothing yet."""
        return self.source.zarr_store()

    def read_failure(self, err: BaseException, what: str, key: str) -> BaseException:
        """What a failed read ``what key`` of `existing_store` raises: ``err``, credentials masked."""
        return self.source.scrubbed(err)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"


# -- helpers every backend uses --------------------------------------------------------------------------------


def check_size(source: ByteSource, key: str, size: int, max_size: int) -> None:
    if size > max_size:
        raise CorruptDataError(
            f"{key!r} on {source.label} is {size} bytes, more than the {max_size} its array's chunk layout "
            "can encode to: refusing to read it"
        )


def checked_key(source: ByteSource, key: str) -> str:
    """``key`` if it names an object inside the store, else ValueError (as zarr-python's normalize_path): no
    key, whatever the metadata or the caller says, may read outside the store's root."""
    bounded = f"/{key}/"  # a "." or ".." segment, first, last or between slashes
    if key.startswith("/") or "/./" in bounded or "/../" in bounded:
        raise ValueError(
            f"expected a key inside the store: relative, without '.' or '..' segments. Got {key!r} on "
            f"{source.label} instead."
        )
    return key


def join_key(prefix: str, key: str) -> str:
    """``key`` under ``prefix`` ("": the store's root)."""
    return f"{prefix}/{key}" if prefix else key


def first_line(err: BaseException, secrets: Sequence[str] = ()) -> str:
    """The first line of a third party's error, credentials masked (see `redact`)."""
    text = redact(str(err), secrets).strip().splitlines()
    return text[0][:300] if text else ""


def noted(err: BaseException, key: str) -> BaseException:
    """``err`` of a failed `Sink.update`, with a note naming its key."""
    err.add_note(f"while merging into {key!r}")
    return err
