"""What the storage wing keeps once per process: the sources unpickled here, and the fork guard of obstore.

A source pickled to a dask worker is rebuilt there through `restore`, once per process and payload, so every task
on the worker shares one store and its connection pool. obstore's runtime does not survive ``fork()``:
`check_not_forked` refuses a request from a forked child rather than let it hang.
"""

from __future__ import annotations

import collections
import hashlib
import os
import pickle
import threading
import weakref

from xarray_zarrmax.errors import StoreAccessError
from xarray_zarrmax.storage.abc import ByteSource
from xarray_zarrmax.tuning import RECENT_STORE_BYTES, RECENT_STORES

_registry_lock = threading.Lock()
#: Sources unpickled in this process, by digest of their payload: tasks on a worker share one store and its
#: connection pool. Held weakly, since a source no task uses any more is worth nothing, and an in-memory store
#: pickles its contents (one copy per version read would pile up on every worker, without end); the most
#: recently used are also held in `_recent`, up to RECENT_STORE_BYTES of payload, so that tasks running one after
#: another do not unpickle their store (and open its connections) again each time.
_registry: weakref.WeakValueDictionary[bytes, ByteSource] = weakref.WeakValueDictionary()
_recent: collections.OrderedDict[bytes, tuple[ByteSource, int]] = collections.OrderedDict()


def _after_fork() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()  # a lock held by a thread that did not survive fork would never open


os.register_at_fork(after_in_child=_after_fork)


def restore(kind: type[ByteSource], payload: bytes, label: str) -> ByteSource:
    """Unpickle a source once per process: every task on a worker shares its store and connection pool.

    ``payload`` pickles the keyword arguments ``kind`` is built from, but its label.
    """
    digest = hashlib.sha256(payload).digest()  # a digest, never the payload: it holds credentials
    with _registry_lock:
        found = _registry.get(digest)
        if found is None:
            found = _registry[digest] = kind(**pickle.loads(payload), label=label)  # type: ignore[call-arg]
        _recent.pop(digest, None)
        _recent[digest] = (found, len(payload))
        while len(_recent) > 1 and (len(_recent) > RECENT_STORES
                                    or sum(size for _, size in _recent.values()) > RECENT_STORE_BYTES):
            _recent.popitem(last=False)
        return found


# obstore runs its requests on a tokio runtime, whose threads a forked child does not inherit: a request from
# such a child would wait forever. Remember which process first used obstore, and refuse in any other.
_obstore_pid: int | None = None


def check_not_forked(label: str) -> None:
    """Raise `StoreAccessError` in a process forked from one that had already used obstore."""
    global _obstore_pid
    pid = os.getpid()
    if _obstore_pid is None:
        _obstore_pid = pid
    elif _obstore_pid != pid:
        raise StoreAccessError(
            f"{label}: this process was forked from one that had already used obstore, whose runtime does not "
            "survive fork(); a request would hang. Start workers with the 'spawn' or 'forkserver' method "
            "(dask.distributed's default is 'spawn'), or read before the parent first touches the store."
        )
