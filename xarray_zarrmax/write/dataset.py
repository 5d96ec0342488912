"""``to_zarr``: write a Dataset as Zarr v3, one dask task and one PUT per shard, safe under concurrent writers.

Three steps:

1. Metadata is decided by xarray and zarr-python themselves (`xarray_zarrmax.write.staging`): xarray's own Zarr
   writer runs against a store that reads the target and keeps every change in memory, with a writer that
   records what data goes where instead of writing it. So CF encoding, fill values, attributes, dimension
   names, region checks and appends mean exactly what they mean in ``Dataset.to_zarr``.
2. Every changed metadata document (the group's and each array's ``zarr.json``, consolidated metadata) is
   sent in one concurrent batch.
3. Data: one dask task per shard (a chunk when unsharded), or per dask chunk where a chunk spans several
   shards, or per group of adjacent small ones (`WRITE_BYTES_IN_FLIGHT`). A task encodes its shards with
   zarr-python's codecs (`xarray_zarrmax.write.codec`) and sends each in one PUT. A shard only partly
   covered (a region's or an append's edge) is read, merged and written back conditionally
   (`xarray_zarrmax.storage.Sink.update`), so concurrent writers of one shard never lose data.
"""

from __future__ import annotations

import functools
import json
import math
import uuid
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from xarray_zarrmax.advise.advisor import advised_variables
from xarray_zarrmax.core.bytes import Encoded
from xarray_zarrmax.core.loop import gather_or_cancel, run_sync
from xarray_zarrmax.storage.abc import Sink, Update
from xarray_zarrmax.storage.resolve import resolve_sink
from xarray_zarrmax.tuning import MAX_MERGES, MERGE_BYTES_IN_FLIGHT, WRITE_BYTES_IN_FLIGHT
from xarray_zarrmax.write.advised import advised_encoding, check_advise_request
from xarray_zarrmax.write.arguments import check_arguments
from xarray_zarrmax.write.codec import ObjectCodec
from xarray_zarrmax.write.plan import (
    aligned_chunks,
    block_groups,
    check_aligned,
    group_factors,
    grouped_chunks,
    objects_for_block,
    per_group,
)

if TYPE_CHECKING:
    from xarray_zarrmax.write.staging import StagingStore  # imports zarr: only when writing


@dataclass(frozen=True, slots=True)
class ArrayTarget:
    """Where one array's objects go and how they are encoded: what each write task carries (small, picklable;
    never the data, which dask hands to each task block by block)."""

    path: str  # the array's path in the store
    codec: ObjectCodec
    fresh: bool  # the array did not exist before this call: no stored object to merge with
    # This call deleted everything under the array's path (mode "w"): an empty object has nothing stored to
    # delete. A new array elsewhere may sit on objects an older one left behind; zarr deletes those keys too.
    cleared: bool
    # The array's shape in the store before this call (None: it did not exist; (): not known). Objects wholly
    # past it are most likely absent: their merge tries to create them before it reads anything.
    stored_shape: tuple[int, ...] | None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codec.metadata.shape)

    @property
    def dims(self) -> tuple[str, ...]:
        names = self.codec.metadata.dimension_names
        return tuple(str(n) for n in names) if names else tuple(f"dim_{i}" for i in range(len(self.shape)))

    @property
    def kind(self) -> str:
        return "shard" if self.codec.metadata.sharding_codec is not None else "chunk"

    def likely_new(self, coords: tuple[int, ...]) -> bool:
        """Whether the object at ``coords`` lay wholly outside the array before this call (a guess: another
        writer may have created it since; `Sink.update` checks)."""
        if self.stored_shape is None:
            return True
        if len(self.stored_shape) != len(coords):
            return False
        return any(c * s >= n for c, s, n in zip(coords, self.codec.object_shape, self.stored_shape, strict=True))

    def key(self, coords: tuple[int, ...]) -> str:
        chunk_key = self.codec.metadata.encode_chunk_key(coords)
        return f"{self.path}/{chunk_key}" if self.path else chunk_key


@dataclass(frozen=True, slots=True)
class ArrayWrite:
    """One variable's data (numpy or dask, already CF-encoded by xarray) and where in which array it goes."""

    target: ArrayTarget
    data: Any
    start: tuple[int, ...]


class _Recorder:
    """Stands in for xarray's ArrayWriter: records each variable's data and target instead of writing."""

    def __init__(self) -> None:
        self.writes: list[tuple[Any, Any, tuple[slice, ...]]] = []

    def add(self, source: Any, target: Any, region: tuple[slice, ...] | None = None) -> None:
        self.writes.append((source, target, tuple(region) if region else ()))


WriteMode = Literal["w", "w-", "a", "a-", "r+"]


def _stage(ds: Any, staging: StagingStore, *, mode: WriteMode | None, group: str | None,
           encoding: Mapping[str, Any] | None, consolidated: bool | None, region: Any, append_dim: Hashable | None,
           write_empty_chunks: bool | None) -> _Recorder:
    """Run xarray's own Zarr writer against ``staging``: its metadata lands there, its data in the recorder."""
    from xarray_zarrmax import xarray_compat

    xarray_compat.validate_dataset_names(ds)
    for v in ds.variables.values():
        if v.size == 0:
            v.load()  # as Dataset.to_zarr: dask cannot store zero-length arrays
    zstore = xarray_compat.writable_zarr_store(
        staging, mode=mode, group=group, consolidated=consolidated, append_dim=append_dim, region=region,
        safe_chunks=False,  # our own check below: partial shards are safe here, split shards are not
        zarr_format=3, write_empty_chunks=write_empty_chunks,
    )
    ds = xarray_compat.validate_and_autodetect_region(zstore, ds)
    xarray_compat.validate_encoding(zstore, encoding or {})
    recorder = _Recorder()
    xarray_compat.dump_to_store(ds, zstore, recorder, encoding=dict(encoding or {}))
    return recorder


def _array_writes(recorder: _Recorder, staging: StagingStore) -> list[ArrayWrite]:
    paths = [target.path for _, target, _ in recorder.writes]
    stored = run_sync(gather_or_cancel(*(_stored_shape(staging, p) for p in paths)))  # one concurrent batch
    out = []
    for (source, target, region), before in zip(recorder.writes, stored, strict=True):
        metadata = target.metadata
        if metadata.zarr_format != 3:
            raise ValueError(f"array {target.path!r} is Zarr format {metadata.zarr_format}: only format 3 is written")
        shape = tuple(metadata.shape)
        start = tuple(r.indices(n)[0] for r, n in zip(region, shape, strict=True)) if region else (0,) * len(shape)
        # The array's own setting, as xarray resolved it (the argument, the variable's encoding, zarr's config)
        codec = ObjectCodec(metadata, bool(target.config.write_empty_chunks))
        codec.spec()  # a codec zarr cannot set up fails here, before any metadata is written
        cleared = staging.cleared(target.path)
        out.append(ArrayWrite(ArrayTarget(target.path, codec, before is None, cleared, before), source, start))
    return out


async def _stored_shape(staging: StagingStore, path: str) -> tuple[int, ...] | None:
    """The array's shape in the target before this call: None where it was not there (or this call deleted
    it), () where its document is there but names no shape (nothing is then guessed absent). Usually no
    request: xarray's writer read the document already."""
    data = await staging.base_bytes(f"{path}/zarr.json" if path else "zarr.json")
    if data is None:
        return None
    try:
        shape = json.loads(data).get("shape")
        return tuple(int(n) for n in shape) if isinstance(shape, list) else ()
    except (ValueError, TypeError, AttributeError):
        return ()  # zarr itself reads the document and says what is wrong with it


def _staged(ds: Any, sink: Sink, encoding: Mapping[str, Any] | None,
            staging_args: Mapping[str, Any]) -> tuple[StagingStore, _Recorder]:
    """xarray's writer run against a staging store over ``sink``: nothing is written yet."""
    from xarray_zarrmax.write.staging import StagingStore

    staging = StagingStore(sink.existing_store(), sink.label, sink.read_failure)
    try:
        if sink.may_hold_v2:
            _refuse_v2(staging, staging_args)
        return staging, _stage(ds, staging, encoding=encoding, **staging_args)
    except Exception as err:
        err.add_note(f"while preparing the metadata to write to {sink.label} (nothing was written)")
        raise


def _refuse_v2(staging: StagingStore, staging_args: Mapping[str, Any]) -> None:
    """Refuse to write into a Zarr v2 group (the target group or one above it): a v3 group written beside its
    ``.zgroup`` would hide its arrays from every reader, which opens the v3 one. Mode "w" replaces the target
    group itself, its v2 files included. A level that holds a ``zarr.json`` already (a store written in both
    formats) is v3 to every reader: writing there hides nothing, and xarray writes there too."""
    group = (staging_args.get("group") or "").strip("/")
    parts = group.split("/") if group else []
    prefixes = [("/".join(parts[:i]) + "/") if i else "" for i in range(len(parts) + 1)]
    mode = staging_args.get("mode") or ("a" if staging_args.get("append_dim") is not None
                                        else "r+" if staging_args.get("region") is not None else "w-")
    if mode == "w":
        prefixes = prefixes[:-1]
    if staging.base is None or not prefixes:
        return
    target = f"{group}/" if group else ""
    keys = [f"{p}{name}" for p in prefixes for name in (".zgroup", ".zarray")]
    above = [f"{p}zarr.json" for p in prefixes if p != target]  # the target's own is read below anyway
    # In the same round trip, the target group's document, which xarray's writer reads first (kept by staging)
    *found, document = run_sync(gather_or_cancel(*(staging.exists(k) for k in (*keys, *above)),
                                                 staging.base_bytes(f"{target}zarr.json")))
    v3 = {k.removesuffix("zarr.json") for k, hit in zip(above, found[len(keys):], strict=True) if hit}
    if document is not None:
        v3.add(target)
    v2 = [k for k, hit in zip(keys, found, strict=False) if hit and k.rpartition(".")[0] not in v3]
    if v2:
        raise ValueError(
            f"{staging.label} holds a Zarr format 2 {'array' if v2[0].endswith('.zarray') else 'group'} "
            f"({v2[0]!r}): xarray_zarrmax.to_zarr writes Zarr format 3 only, and a format 3 group beside it "
            f"would hide its variables from readers (mode={mode!r}). Write to a new store, use mode='w' to "
            "replace it, or write with Dataset.to_zarr(zarr_format=2)."
        )


def _as_dataset(obj: Any) -> Any:
    """A Dataset as given; a DataArray as ``DataArray.to_zarr`` stores it, so that ``xr.open_dataarray`` reads it
    back: under its name, or under xarray's placeholder name when it has none or its name is one of its
    coordinates or dimensions (the real name then kept in an attribute)."""
    import xarray as xr

    from xarray_zarrmax.xarray_compat import dataarray_names

    if isinstance(obj, xr.Dataset):
        return obj
    if not isinstance(obj, xr.DataArray):
        raise TypeError(f"xarray_zarrmax.to_zarr writes an xarray Dataset or DataArray. Got {type(obj).__name__}.")
    name_attribute, placeholder = dataarray_names()
    if obj.name is None:
        return obj.to_dataset(name=placeholder)
    if obj.name in obj.coords or obj.name in obj.dims:
        dataset = obj.to_dataset(name=placeholder)
        dataset.attrs[name_attribute] = obj.name
        return dataset
    return obj.to_dataset()


#: Arguments of dask.array.store, which Dataset.to_zarr passes chunkmanager_store_kwargs to and this does not call.
_STORE_ONLY_KWARGS = ("regions", "compute", "return_stored", "load_stored")


def _compute_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``chunkmanager_store_kwargs`` as keywords of dask's compute (see `to_zarr`)."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"expected chunkmanager_store_kwargs as a mapping. Got {type(kwargs).__name__}.")
    refused = sorted(str(k) for k in kwargs if k in _STORE_ONLY_KWARGS)
    if refused:
        raise ValueError(f"chunkmanager_store_kwargs {refused} are arguments of dask.array.store, which "
                         "xarray_zarrmax.to_zarr does not call; it takes keywords of dask's compute (scheduler, "
                         "num_workers, ...) there.")
    return {k: v for k, v in kwargs.items() if k != "lock"}  # no write here takes a lock


def _check_known_chunk_sizes(ds: Any) -> None:
    """Dask chunks of unknown size (NaN, e.g. after boolean indexing) cannot be matched to stored objects."""
    for name, variable in ds.variables.items():
        chunks = getattr(variable, "chunks", None)
        if chunks and any(np.isnan(c) for dim in chunks for c in dim):
            raise ValueError(
                f"variable {name!r} has dask chunks of unknown size {tuple(chunks)}: compute them first "
                "(dask's compute_chunk_sizes(), or .persist()) so each can be placed in its shards."
            )


def _with_advised_layout(ds: Any, store: Any, sink: Sink, patterns: Mapping[str, Any],
                         advise_options: Mapping[str, Any] | None, storage_options: Mapping[str, Any] | None,
                         staging_args: Mapping[str, Any]) -> tuple[Any, frozenset[str]]:
    """``ds`` (a shallow copy) with the advisor's chunks and shards in the encoding of the variables it lays
    out, the rest of their encoding kept (CF packing, compressors: as a write without encoding would), and
    the paths of those arrays. Whatever xarray would refuse, and arrays that exist already, are refused
    before the store is probed."""
    _, names = advised_variables(ds, (advise_options or {}).get("variable"))
    prefix = f"{staging_args['group'].strip('/')}/" if staging_args.get("group") else ""
    paths = frozenset(prefix + str(n) for n in names)  # a name not a string: xarray refuses it in _staged
    staging, recorder = _staged(ds, sink, None, staging_args)
    existing = sorted(w.target.path for w in _array_writes(recorder, staging)
                      if w.target.path in paths and not w.target.fresh)
    if existing:
        raise ValueError(
            f"encoding='advise' chooses the layout of new arrays; {existing} exist in {sink.label} already and "
            f"keep their stored chunks and shards (mode={staging_args['mode']!r}). Write them without "
            "encoding, or with mode='w' to replace the store."
        )
    layouts = advised_encoding(ds, store, patterns, advise_options, storage_options)
    ds = ds.copy(deep=False)  # new variables, same data: the caller's encodings stay as they were
    for name, layout in layouts.items():
        ds[name].encoding = {**ds[name].encoding, "shards": None, **layout}
    return ds, paths


def _commit_metadata(sink: Sink, staging: StagingStore) -> None:
    """Deletions first (mode "w"), then every changed metadata document in one concurrent batch."""
    for prefix in staging.deleted_prefixes:
        sink.delete_prefix(prefix)
    written = staging.written
    for key in sorted(staging.deleted_keys - set(written)):
        sink.delete(key)
    sink.put_many(written)


# -- data ----------------------------------------------------------------------------------------------------


def _as_dask(write: ArrayWrite, align_chunks: bool) -> Any:
    """The data as a dask array whose chunks each cover whole objects (but at the written range's edges)."""
    import dask.array as da
    from dask.base import is_dask_collection

    target, data = write.target, write.data
    object_shape = target.codec.object_shape
    if not is_dask_collection(data):
        values = np.asarray(data)
        threads = _dask_threads()
        chunks = grouped_chunks(write.start, values.shape, object_shape, target.codec.dtype.itemsize,
                                target_bytes=WRITE_BYTES_IN_FLIGHT // threads, min_blocks=2 * threads)
        # a name of our own: dask would otherwise hash every byte of the array to name it
        return da.from_array(values, chunks=chunks, name=f"zarrmax-source-{uuid.uuid4().hex}")
    if align_chunks:
        try:
            check_aligned(target.path, target.dims, write.start, data.chunks, object_shape, target.kind)
        except ValueError:
            data = data.rechunk(tuple(aligned_chunks(a, n, s)
                                      for a, n, s in zip(write.start, data.shape, object_shape, strict=True)))
    check_aligned(target.path, target.dims, write.start, data.chunks, object_shape, target.kind)
    return data


def write_blocks(blocks: Sequence[Any], write: ArrayTarget, sink: Sink, starts: Sequence[tuple[int, ...]]) -> int:
    """Write dask blocks of one array (each covering whole objects but at the written range's edges; ``starts``:
    where each begins): every object covered whole in one PUT, all of them at once; every object covered in
    part by a conditional read-merge-write, several at once where the store's requests are round trips.
    Returns the number of objects touched."""
    codec = write.codec
    puts: dict[str, Encoded] = {}
    deletes: list[str] = []
    updates: list[Update] = []
    touched = 0
    for block, start in zip(blocks, starts, strict=True):
        values = np.asarray(block, dtype=codec.dtype)
        for part in objects_for_block(write.shape, codec.object_shape, start, values.shape):
            touched += 1
            key = write.key(part.coords)
            try:
                inside = tuple(min(s, n - c * s) for c, s, n in zip(part.coords, codec.object_shape, write.shape,
                                                                      strict=True))
                # An object cut by the array's edge, as this write saw it, may hold data past that edge by now
                # (an append since): replaced whole only where the array is new, else merged like any partial
                # write.
                if part.whole and (write.fresh or inside == codec.object_shape):
                    encoded = codec.encode(_full_object(codec, values, part.in_object, part.in_block), inside=inside,
                                           pooled=sink.gives_back_buffers)
                    if encoded is not None:
                        puts[key] = encoded
                    elif not write.cleared:
                        deletes.append(key)  # it may hold older data (a new array: an older one's leftovers)
                else:
                    merge = _merger(codec, values[part.in_block], part.in_object, key)
                    updates.append(Update(key, merge, write.likely_new(part.coords)))
            except Exception as err:
                err.add_note(f"while writing {key!r} (array {write.path!r}) to {sink.label}")
                raise
    try:
        sink.put_many(puts)
    except Exception as err:
        err.add_note(f"while writing {len(puts)} objects of array {write.path!r} to {sink.label}")
        raise
    try:
        sink.delete_many(deletes)
    except Exception as err:
        err.add_note(f"while deleting objects of array {write.path!r} from {sink.label}")
        raise
    object_bytes = math.prod(codec.object_shape) * codec.dtype.itemsize
    try:
        sink.update_many(updates, max(1, min(MAX_MERGES, MERGE_BYTES_IN_FLIGHT // max(1, object_bytes))))
    except Exception as err:
        err.add_note(f"while merging into objects of array {write.path!r} on {sink.label}")
        raise
    return touched


def _full_object(codec: ObjectCodec, values: np.ndarray, in_object: tuple[slice, ...],
                 in_block: tuple[slice, ...]) -> np.ndarray:
    """The object's full-shape array: the block's part, padded with the fill value beyond the array's edge."""
    part = values[in_block]
    if part.shape == codec.object_shape:
        return part
    out = codec.empty()
    out[in_object] = part
    return out


def _merger(codec: ObjectCodec, part: np.ndarray, in_object: tuple[slice, ...], key: str) -> Any:
    def merge(stored: Any) -> Encoded | None:
        return codec.merge(stored, part, in_object, f"merging into {key!r}")

    return merge


def _write_blocks_collecting(blocks: Sequence[Any], write: ArrayTarget, sink: Sink,
                             starts: Sequence[tuple[int, ...]]) -> tuple[int, Any]:
    """`write_blocks`, returning also what the caller must collect (an Icechunk fork holding the writes)."""
    return write_blocks(blocks, write, sink, starts), sink.task_result()


def _block_tasks(write: ArrayWrite, data: Any, sink: Sink, collecting: bool, graph: dict[Any, Any]) -> list[Any]:
    """Add write tasks for the dask blocks of ``data`` to ``graph``: one per group of adjacent blocks of at most
    its share of `WRITE_BYTES_IN_FLIGHT` (one block where blocks are that large; a group of small blocks sends
    its objects' PUTs at once, where a task per block waited on dask's few threads). Written by
    hand: ``dask.delayed`` per block tokenized and walked every argument (0.23 ms a block, a sixth of a
    320-object local write). The target and sink ride in the function: dask would walk them looking for
    collections (the target's zarr metadata)."""
    offsets = [np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) if c else np.zeros(1, int) for c in data.chunks]
    largest = math.prod(max(c) if c else 0 for c in data.chunks) * write.target.codec.dtype.itemsize
    threads = _dask_threads()
    most = per_group(math.prod(data.numblocks), largest, target_bytes=WRITE_BYTES_IN_FLIGHT // threads,
                     min_groups=2 * threads)
    write_fn = _write_blocks_collecting if collecting else write_blocks
    name = f"write_block-{uuid.uuid4().hex}"  # as dask.delayed named them: dashboards and tests know it
    keys = []
    for group, blocks in block_groups(data.numblocks, group_factors(data.numblocks, most)):
        starts = [tuple(int(a + off[i]) for a, off, i in zip(write.start, offsets, index, strict=True))
                  for index in blocks]
        key = (name, *group)
        graph[key] = (functools.partial(write_fn, write=write.target, sink=sink, starts=starts),
                      [(data.name, *index) for index in blocks])
        keys.append(key)
    return keys


def _dask_threads() -> int:
    """The threads of dask's local schedulers (a cluster's workers may have more: groups stay small anyway)."""
    import dask
    from dask.system import CPU_COUNT

    return int(dask.config.get("num_workers", None) or CPU_COUNT)


def _tasks_done(done: Any, arrays: list[Any], graph: dict[Any, Any], keys: list[Any]) -> Any:
    """One Delayed that runs every block task of ``graph`` (reading ``arrays``) and returns ``done(*results)``."""
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    final = f"zarrmax-done-{uuid.uuid4().hex}"
    graph[final] = (done, *keys)
    return Delayed(final, HighLevelGraph.from_collections(final, graph, dependencies=arrays))


def _done(*counts: int) -> int:
    return int(sum(counts))


def _done_collecting(*results: tuple[int, Any]) -> Any:
    """The forks that tasks in other processes wrote to, merged into one (on whichever worker runs this), or
    None where every task wrote in the caller's process."""
    from xarray_zarrmax.storage.zarr_store import merge_forks

    return merge_forks([fork for _, fork in results])


def to_zarr(ds: Any, store: Any, *, mode: WriteMode | None = None,
            group: str | None = None, encoding: Mapping[str, Any] | Literal["advise"] | None = None,
            consolidated: bool | None = None,
            region: Mapping[str, slice | Literal["auto"]] | Literal["auto"] | None = None,
            append_dim: Hashable | None = None, zarr_format: int | None = None,
            storage_options: dict[str, Any] | None = None, compute: bool = True,
            write_empty_chunks: bool | None = None,
            align_chunks: bool = False, safe_chunks: bool = True,
            chunkmanager_store_kwargs: Mapping[str, Any] | None = None,
            patterns: Mapping[str, Any] | None = None,
            advise_options: Mapping[str, Any] | None = None) -> Any:
    """Write ``ds`` (a Dataset, or a DataArray as ``DataArray.to_zarr`` writes it) to a Zarr v3 store: one dask
    task and one PUT per shard.

    Arguments mean what they mean in ``xarray.Dataset.to_zarr``; what differs:

    Parameters
    ----------
    ds
        The Dataset.
    store
        A local path or ``file://`` URL, an ``s3://`` URL (with ``storage_options`` by obstore's or s3fs's
        names), an obstore store, zarr's ``ObjectStore`` / ``LocalStore``, or a writable Icechunk ``Session``
        or ``ForkSession``: the writes land in the session, uncommitted (commit it yourself). Data tasks that
        run in another process write to forks of it, merged back into it when all are done.
    mode
        As xarray: "w-" unless ``append_dim`` ("a") or ``region`` ("r+") is given.
    encoding
        As xarray, or ``"advise"``: the layout `xarray_zarrmax.advise` ranks best for ``patterns`` (chunks and
        shards of the largest data variable it can lay out and of those with its dimensions and shape; the rest
        of their encoding is kept, and the other variables are written as without ``encoding``). The store is
        probed beside the target (a path's folder, a URL's prefix; nothing is probed for a store object unless
        ``advise_options["store"]`` names a place), then the data is rechunked to the advised shards
        (``align_chunks``) and written. A line on stderr says the layout chosen.
    zarr_format
        3, or None (xarray's default): format 3. An existing Zarr v2 store or group is refused, not appended to.
    compute
        False: metadata and the variables that are not dask arrays are written now (as ``Dataset.to_zarr``
        does), dask arrays when the returned ``dask.delayed`` object is computed. For an
        Icechunk session, computing it returns the ``ForkSession`` holding the writes made in other processes
        (merge it, ``session.merge(fork)``, before committing), or None where every task ran in this process
        and wrote into the session itself.
    write_empty_chunks
        As xarray: None takes each variable's ``encoding["write_empty_chunks"]``, else zarr's config
        (``array.write_empty_chunks``, False by default: chunks and shards holding only the fill value are not
        stored); True or False sets it for every variable.
    align_chunks
        Dask chunks must not split a shard (two tasks would write the same object): ValueError naming the
        variable, dimension and sizes, unless this is True, which rechunks to one dask chunk per shard.
        Shards only partly covered by the written range (edges of a region or an append) are fine either way:
        they are read, merged and written back conditionally.
    safe_chunks
        True (xarray's default): dask chunks that split a shard are refused as above. False, which in xarray
        skips that check and leaves the consequences to you: here it rechunks as ``align_chunks=True`` does, so
        no shard is ever written by two tasks. Either way a region's partly covered edge shards are merged
        safely, where xarray refuses them with ``safe_chunks=True`` in mode "r+".
    chunkmanager_store_kwargs
        As xarray: keywords for computing the data tasks (dask's ``compute``: ``scheduler``, ``num_workers``,
        ...), used where this call computes them (always, but for the dask arrays of ``compute=False``).
        ``lock`` is accepted and unused (no write here needs one); ``regions``, ``compute``,
        ``return_stored`` and ``load_stored`` (arguments of ``dask.array.store``, which this does not call)
        are refused.
    patterns
        With ``encoding="advise"``: access pattern -> weight, as `xarray_zarrmax.advise` takes them (e.g.
        ``{"timeseries": 0.5, "map": 0.5}``).
    advise_options
        With ``encoding="advise"``: more of `xarray_zarrmax.advise`'s keywords (``variable``, ``store`` (where
        to probe, or None for no probe), ``storage_options`` (the probe's; default: the write's),
        ``budget_mb``, ``max_object_mb``, ``max_objects``, ``costs`` (a calibration instead of probing),
        ``layouts`` (candidates instead of the generated ones), ``batch``, ``progress``).

    Returns
    -------
    None, or with ``compute=False`` a ``dask.delayed`` object that writes the data (and returns the number of
    stored objects written; for an Icechunk session, the fork to merge or None).
    """
    ds = _as_dataset(ds)
    check_arguments(ds, encoding=encoding, group=group, append_dim=append_dim, storage_options=storage_options,
                    zarr_format=zarr_format, consolidated=consolidated, compute=compute, align_chunks=align_chunks,
                    safe_chunks=safe_chunks, write_empty_chunks=write_empty_chunks)
    compute_kwargs = _compute_kwargs(chunkmanager_store_kwargs)
    _check_known_chunk_sizes(ds)
    from dask.base import is_dask_collection

    if encoding == "advise":
        check_advise_request(ds, patterns, advise_options, region=region, append_dim=append_dim, mode=mode)
    elif patterns is not None or advise_options is not None:
        raise ValueError("patterns= and advise_options= apply to encoding='advise' only. Got encoding="
                         f"{'a mapping' if encoding is not None else None} with them.")
    sink = resolve_sink(store, storage_options)
    staging_args: dict[str, Any] = {"mode": mode, "group": group, "consolidated": consolidated, "region": region,
                                    "append_dim": append_dim, "write_empty_chunks": write_empty_chunks}
    advised: frozenset[str] = frozenset()  # paths of the arrays laid out by the advisor
    if encoding == "advise":
        ds, advised = _with_advised_layout(ds, store, sink, patterns or {}, advise_options, storage_options,
                                           staging_args)
        encoding = None
    staging, recorder = _staged(ds, sink, encoding, staging_args)
    writes = _array_writes(recorder, staging)
    # alignment errors before any write; advised variables are aligned to shards their writer never saw
    arrays = [_as_dask(w, align_chunks or not safe_chunks or w.target.path in advised) for w in writes]
    _commit_metadata(sink, staging)
    collecting = sink.collects
    done = _done_collecting if collecting else _done
    # As Dataset.to_zarr: with compute=False, variables that are not dask arrays are written now all the same
    now: tuple[list[Any], dict[Any, Any], list[Any]] = ([], {}, [])  # arrays, graph, task keys
    later: tuple[list[Any], dict[Any, Any], list[Any]] = ([], {}, [])
    for w, a in zip(writes, arrays, strict=True):
        batch = later if compute or is_dask_collection(w.data) else now
        if not compute and batch is later:
            # computed at some later time, when a new array may hold what others wrote into it meanwhile
            w = replace(w, target=replace(w.target, fresh=False, cleared=False))
        batch[0].append(a)
        batch[2].extend(_block_tasks(w, a, sink, collecting, batch[1]))
    if now[2]:
        result = _tasks_done(done, *now).compute(**compute_kwargs)
        if collecting:
            sink.collect([result])
    delayed = _tasks_done(done, *later)
    if not compute:
        return delayed
    result = delayed.compute(**compute_kwargs)
    if collecting:
        sink.collect([result])
    return None
