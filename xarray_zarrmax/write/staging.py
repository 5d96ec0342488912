"""A zarr Store that reads the target but keeps every change in memory: where `to_zarr` lets xarray and
zarr-python decide the metadata (CF encoding, fill values, dimension names, resizes for ``append_dim``,
consolidation) without sending a single write, so that we can send them ourselves, all at once.

Reads of keys not changed here go to the target (read-only): region detection and appends see the real
store. Deletions are recorded, as keys and as whole prefixes, never sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import MemoryStore


class StagingStore(Store):
    """Changes in memory over a read-only ``base`` zarr Store (None: an empty target).

    ``failure(err, what, key)`` turns an error of the base into what to raise: safe to show (the base is a third
    party's store: its errors may quote the endpoint URL with its password) and of this package's types;
    ``label`` names the target in messages.
    """

    supports_writes = True
    supports_deletes = True
    supports_listing = True

    def __init__(self, base: Store | None, label: str = "",
                 failure: Callable[[BaseException, str, str], BaseException] = lambda err, what, key: err) -> None:
        super().__init__(read_only=False)
        self.base = base
        self.label = label
        self.translate = failure
        self.memory = MemoryStore()
        # Whole objects read from the base, kept: xarray reads an array's document twice, `to_zarr` reads it
        # again for the array's stored shape, each a round trip on S3. What the target held when read is what
        # the write is prepared against, so one read per key is also the consistent answer.
        self._read: dict[str, Buffer | None] = {}
        self.deleted_keys: set[str] = set()
        self.deleted_prefixes: list[str] = []  # "" is the whole store

    @property
    def supports_consolidated_metadata(self) -> bool:
        # xarray consolidates only where the target can hold it (an Icechunk store cannot)
        return bool(getattr(self.base, "supports_consolidated_metadata", True))

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__

    # -- what was changed ---------------------------------------------------------------------------------

    @property
    def written(self) -> dict[str, bytes]:
        """Every key set here, with its bytes."""
        return {k: v.to_bytes() for k, v in self.memory._store_dict.items()}

    def cleared(self, path: str) -> bool:
        """Whether this call deleted everything under ``path`` (a prefix deletion covering it, mode "w")."""
        return any(p == "" or path == p or path.startswith(p.rstrip("/") + "/") for p in self.deleted_prefixes)

    def _hidden(self, key: str) -> bool:
        """Whether the base's object at ``key`` was deleted here."""
        return key in self.deleted_keys or self.cleared(key)

    # -- zarr's Store interface ---------------------------------------------------------------------------

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        if key in self.memory._store_dict:
            return await self.memory.get(key, prototype, byte_range)
        return await self._base_get(key, prototype, byte_range)

    async def base_bytes(self, key: str) -> bytes | None:
        """What the target held at ``key`` (read once; None: nothing, or deleted by this call), never what this
        call has set there since."""
        from zarr.core.buffer import default_buffer_prototype

        got = await self._base_get(key, default_buffer_prototype())
        return None if got is None else got.to_bytes()

    async def _base_get(self, key: str, prototype: BufferPrototype,
                        byte_range: ByteRequest | None = None) -> Buffer | None:
        if self.base is None or self._hidden(key):
            return None
        if byte_range is None and key in self._read:
            return self._read[key]
        try:
            got = await self.base.get(key, prototype, byte_range)
        except Exception as err:
            failure = self._failure(err, "GET", key)
        else:
            if byte_range is None:
                self._read[key] = got
            return got
        raise failure  # outside the except clause: not even __context__ keeps the store's own text

    def _failure(self, err: BaseException, what: str, key: str) -> BaseException:
        failure = self.translate(err, what, key)
        failure.add_note(f"{what} {key!r} on {self.label}, reading what the target holds before writing")
        return failure

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]) -> list[Buffer | None]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    async def exists(self, key: str) -> bool:
        if key in self.memory._store_dict:
            return True
        if self.base is None or self._hidden(key):
            return False
        if key in self._read:
            return self._read[key] is not None
        try:
            return await self.base.exists(key)
        except Exception as err:
            failure = self._failure(err, "HEAD", key)
        raise failure

    async def set(self, key: str, value: Buffer) -> None:
        await self.memory.set(key, value)

    async def delete(self, key: str) -> None:
        await self.memory.delete(key)
        self.deleted_keys.add(key)

    async def delete_dir(self, prefix: str) -> None:
        # Recorded, not listed key by key: the target may hold millions of chunks under the prefix.
        await self.memory.delete_dir(prefix)
        self.deleted_prefixes.append(prefix.rstrip("/"))

    async def _merged(self, base_keys: AsyncIterator[str], memory_keys: AsyncIterator[str],
                      hide: bool = True) -> AsyncIterator[str]:
        seen = set()
        async for key in memory_keys:
            seen.add(key)
            yield key
        failure = None
        try:
            async for key in base_keys:
                if key not in seen and not (hide and self._hidden(key)):
                    seen.add(key)
                    yield key
        except Exception as err:
            failure = self._failure(err, "LIST", "")
        if failure is not None:
            raise failure

    async def _empty(self) -> AsyncIterator[str]:
        nothing: tuple[str, ...] = ()  # an async generator that yields nothing
        for key in nothing:
            yield key

    async def is_empty(self, prefix: str) -> bool:
        # The base's own answer where nothing under ``prefix`` was deleted here: Icechunk answers it for any
        # prefix, but lists only prefixes of groups and arrays that exist (zarr's default is_empty lists).
        if not await self.memory.is_empty(prefix):
            return False
        path = prefix.rstrip("/")
        if self.base is None or self._hidden(path):
            return True
        if any(k == path or k.startswith(f"{path}/") or not path
               for k in (*self.deleted_keys, *self.deleted_prefixes)):
            # Something under it was deleted here: whether anything else is left needs a listing, of the whole
            # store (any store lists that; Icechunk would refuse the prefix if it is no node), deletions hidden.
            start = f"{path}/" if path else ""
            async for key in self.list():
                if key.startswith(start):
                    return False
            return True
        try:
            return await self.base.is_empty(prefix)
        except Exception as err:
            failure = self._failure(err, "LIST", prefix)
        raise failure

    def list(self) -> AsyncIterator[str]:
        base = self.base.list() if self.base is not None else self._empty()
        return self._merged(base, self.memory.list())

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        base = self.base.list_prefix(prefix) if self.base is not None else self._empty()
        return self._merged(base, self.memory.list_prefix(prefix))

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        base = self.base.list_dir(prefix) if self.base is not None else self._empty()
        return self._merged(self._visible_children(prefix, base), self.memory.list_dir(prefix), hide=False)

    async def _visible_children(self, prefix: str, names: AsyncIterator[str]) -> AsyncIterator[str]:
        # a child of a deleted prefix is gone, unless something under it was written again (memory lists it)
        path = prefix.rstrip("/")
        async for name in names:
            if not self._hidden(f"{path}/{name}" if path else name):
                yield name

    def __repr__(self) -> str:
        # The target's label alone: zarr's errors quote the store ("No group found in store ..."), and the
        # user knows the target, not this class. Never the base's repr: it is a third party's.
        return self.label or "a new store"

    def with_read_only(self, read_only: bool = False) -> Any:
        if read_only:
            raise NotImplementedError("a staging store is only ever opened for writing")
        return self
