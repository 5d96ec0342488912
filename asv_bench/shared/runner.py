"""How every table script runs: a `Table` names its flags, the services it needs and its run; `execute` parses
the command line, starts the services, records what the machine was doing before and after, and runs it
(dask-cuda's ``benchmarks/common.py``: a ``Config`` of hooks and one ``execute_benchmark``).

A table script is then its own measurements and formatting, and one line::

    if __name__ == "__main__":
        raise SystemExit(execute(TABLE))

run from the repository root as ``.venv/bin/python -m asv_bench.tables.<name> [flags]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from asv_bench.shared.services import Services, running
from asv_bench.shared.timing import machine_state


@dataclass
class Session:
    """One run of a table: its parsed flags, its services (None where it needs none, or the flags leave them
    out) and the machine's state when it began."""

    args: argparse.Namespace
    services: Services | None = None
    before: dict[str, Any] = field(default_factory=machine_state)

    def minio(self, bucket: str) -> tuple[Any, str]:
        """The MinIO server the table's services started, with ``bucket`` made, and the endpoint to read it
        through (the proxy's, for "proxied" services)."""
        if self.services is None:
            raise RuntimeError("expected the table's MinIO to be running. It was not started.")
        self.services.minio.make_bucket(bucket)
        return self.services.minio, self.services.endpoint

    def save_json(self, path: str, payload: Mapping[str, Any], *, default: Callable[[Any], Any] | None = None) -> None:
        """``payload`` as JSON at ``path``, with the flags (``args``) and the machine's state before and now
        (``machine``: load average, steal ticks), so a saved table says how busy the machine was."""
        with open(path, "w") as f:
            json.dump({"args": vars(self.args), **payload,
                       "machine": {"before": self.before, "after": machine_state()}}, f, indent=1, default=default)


def _no_flags(parser: argparse.ArgumentParser) -> None:
    del parser


@dataclass(frozen=True)
class Table:
    """One table script (dask-cuda's ``Config``): ``doc`` is its ``--help`` text (the module docstring),
    ``flags`` adds its command-line flags, ``run`` measures and prints, returning the exit status (None: 0).

    ``services``: "minio", a MinIO server on loopback; "proxied", MinIO behind a toxiproxy proxy adding
    ``--latency-ms`` to every response. Either is started only when the table has no ``--stores`` flag or
    the flag names ``minio``; a missing binary exits with status 2 and a hint."""

    doc: str
    run: Callable[[Session], int | None]
    flags: Callable[[argparse.ArgumentParser], None] = _no_flags
    services: Literal["", "minio", "proxied"] = ""


def execute(table: Table, argv: list[str] | None = None) -> int:
    """Parse ``argv``, start the table's services, run it; every run notes on stderr the load average before
    and after (a shared machine's other work moves every number)."""
    parser = argparse.ArgumentParser(description=table.doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    table.flags(parser)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("ICECHUNK_LOG", "error")
    session = Session(args)
    with _services(table, args) as services:
        if services is False:
            return 2
        session.services = services if isinstance(services, Services) else None
        code = table.run(session)
    after = machine_state()
    print(f"load average (1, 5, 15 min) {_load(session.before)} before, {_load(after)} after; "
          f"{after['steal_ticks'] - session.before['steal_ticks']} ticks stolen by the host", file=sys.stderr)
    return int(code or 0)


def _load(state: Mapping[str, Any]) -> str:
    return ", ".join(f"{x:.2f}" for x in state["load_average"]) or "n/a"


@contextlib.contextmanager
def _services(table: Table, args: argparse.Namespace) -> Iterator[Services | bool | None]:
    """The table's services, None where it needs none here, False where a binary is missing."""
    wanted = table.services and "minio" in getattr(args, "stores", "minio").split(",")
    if not wanted:
        yield None
        return
    with running(proxy=table.services == "proxied", latency_ms=getattr(args, "latency_ms", 0)) as services:
        yield False if services is None else services


# -- the flags most tables share ------------------------------------------------------------------------------


def _stores(text: str) -> str:
    if unknown := set(text.split(",")) - {"local", "minio"}:
        raise argparse.ArgumentTypeError(f"--stores takes local and minio. Got {sorted(unknown)}.")
    return text


def add_flags(parser: argparse.ArgumentParser, *, mib: int | None = None, mib_help: str = "size of each array (MiB)",
              repeat: int | None = None, stores: bool = False, layouts: bool = False, latency_ms: int | None = None,
              json_file: bool = False, plot_file: bool = False) -> None:
    """The common flags, each only where its argument is given: ``--mib``, ``--repeat``, ``--stores``
    (local,minio), ``--layouts`` (indexes into `read_layouts.layouts`), ``--latency-ms``, ``--json``, ``--plot``."""
    if mib is not None:
        parser.add_argument("--mib", type=int, default=mib, help=mib_help)
    if repeat is not None:
        parser.add_argument("--repeat", type=int, default=repeat)
    if stores:
        parser.add_argument("--stores", default="local,minio", type=_stores)
    if layouts:
        parser.add_argument("--layouts", default="", help="comma-separated indexes into the layout list")
    if latency_ms is not None:
        parser.add_argument("--latency-ms", type=int, default=latency_ms)
    if json_file:
        parser.add_argument("--json", help="also write the results here")
    if plot_file:
        parser.add_argument("--plot", help="also draw them here (PNG)")
