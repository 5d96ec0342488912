"""The ``zarrmax`` command: look at a store, and time a full read of it with a progress bar.

    zarrmax info URL [--group G] [-o key=value ...]
    zarrmax bench URL [--variable NAME ...] [--workers N] [--group G] [-o key=value ...]
    zarrmax advise URL --pattern NAME:WEIGHT ... [--select NAME:WEIGHT:DIM=START:STOP,...] [--variable NAME]
                   [--probe URL | --no-probe | --costs FILE.json] [--save-costs FILE.json] [--budget-mb M]
                   [--max-object-mb M] [--max-objects N] [--top N] [--batch-window DIM=SIZE,...] [--batch-count N]

URL is a local path, or a file://, s3:// or other fsspec URL; ``-o endpoint=http://...`` and the like become
storage_options (credentials may also come from the usual AWS_* environment variables; they are never printed).

Whatever goes wrong because of what was given (arguments, the store, its data) is one line on stderr, naming
what was wrong, and a nonzero exit status: 2 for a command line to change, 1 for anything else.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NoReturn

from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.redact import redact, secrets_in
from xarray_zarrmax.errors import ZarrmaxError

#: Errors the command reports in one line: what bad input (arguments, a store, its data, the environment) raises,
#: ours and the built-in types of zarr-python, xarray, fsspec and NumPy. Anything else is a bug: a traceback.
USER_ERRORS = (ZarrmaxError, OSError, ValueError, TypeError, LookupError, MemoryError, ImportError, RuntimeError,
               ArithmeticError)
OPTION_EXAMPLE = "e.g. -o endpoint=http://127.0.0.1:9000"
SELECT_USAGE = "NAME:WEIGHT:DIM=START:STOP,..."


class Refused(Exception):
    """What the user gave cannot be used: said in one line (``prog: message``), exit ``status`` (2: usage)."""

    def __init__(self, message: str, status: int = 2, prog: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse, its errors one line (no usage block): ``zarrmax advise: argument --top: ...``, status 2."""

    def error(self, message: str) -> NoReturn:
        raise Refused(message, 2, self.prog)


def _whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}. Got {text!r}.")
        return value

    return parse


def _megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of MB. Got {text!r}.")
    return value


def _options(pairs: Sequence[str]) -> dict[str, Any]:
    """``-o KEY=VALUE`` pairs as storage_options; a value is never shown (it may be a credential)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise Refused(f"-o {pair!r}: expected KEY=VALUE, {OPTION_EXAMPLE}")
        if not key:
            raise Refused(f"-o with an empty KEY: expected KEY=VALUE, {OPTION_EXAMPLE}")
        if key in options:
            raise Refused(f"-o {key!r} given twice; expected each storage option once")
        options[key] = value
    return options


def _secrets(pairs: Sequence[str]) -> list[str]:
    """The values of the ``-o`` pairs that may be credentials, also of pairs `_options` refuses."""
    return list(secrets_in({k: v for k, _, v in (p.partition("=") for p in pairs)}))


def _open(args: argparse.Namespace, chunks: Any) -> Any:
    import xarray as xr

    kwargs: dict[str, Any] = {"engine": "zarrmax", "chunks": chunks, "group": args.group}
    if args.option:
        kwargs["storage_options"] = _options(args.option)
    return xr.open_dataset(args.url, **kwargs)


def info(args: argparse.Namespace) -> int:
    from xarray_zarrmax.backend.arrays import FallbackArray, ZarrmaxArray
    from xarray_zarrmax.core.accounting import request_counts
    from xarray_zarrmax.xarray_compat import backend_array

    _options(args.option)  # checked before anything is opened
    start = time.perf_counter()
    with request_counts() as counts:
        ds = _open(args, None)
    elapsed = time.perf_counter() - start
    print(f"{redact(args.url)}: opened in {elapsed:.3f} s with {counts.total('get')} GET and "
          f"{counts.total('list')} LIST requests ({counts.total('bytes')} bytes)")
    print(f"dimensions: {dict(ds.sizes)}")
    for name, var in ds.variables.items():
        enc = var.encoding
        shards = enc.get("shards")
        layout = f"chunks {enc.get('chunks')}" + (f" in shards {shards}" if shards else "")
        wrapper = backend_array(var, (ZarrmaxArray, FallbackArray))
        path = "fast path" if isinstance(wrapper, ZarrmaxArray) else (
            f"zarr-python ({wrapper.reason})" if isinstance(wrapper, FallbackArray) else "loaded at open")
        print(f"  {name}: {var.dims} {var.dtype} {layout}; {path}")
    return 0


def _read_at_open(ds: Any, name: Any) -> str | None:
    """Why variable ``name`` has no dask blocks to time (it was read whole at open), None where it has."""
    from dask.base import is_dask_collection

    var = ds.variables[name]
    if is_dask_collection(var.data):
        return None
    if name in ds.xindexes:
        return "an index coordinate"
    return "0-d" if var.ndim == 0 else "not a dask array"


def _bench_names(args: argparse.Namespace, ds: Any) -> list[Any]:
    """The variables to read: ``--variable`` (each checked), else every data variable with dask blocks."""
    url = redact(args.url)
    lazy = [n for n in ds.data_vars if _read_at_open(ds, n) is None]
    lazy += [n for n in ds.coords if n not in lazy and _read_at_open(ds, n) is None]
    for name in args.variable or ():
        if name not in ds.variables:
            raise Refused(f"--variable {name!r} is not in {url}; expected one of {[str(n) for n in lazy]}")
        why = _read_at_open(ds, name)
        if why is not None:
            raise Refused(f"--variable {name!r} is {why}, read whole at open; expected a variable read lazily, one "
                          f"of {[str(n) for n in lazy]}")
    if args.variable:
        return list(args.variable)
    skipped = {str(n): _read_at_open(ds, n) for n in ds.data_vars if _read_at_open(ds, n) is not None}
    names = [n for n in ds.data_vars if str(n) not in skipped]
    why = ", ".join(sorted({str(w) for w in skipped.values()}))
    if not names:
        raise Refused(f"nothing to read in {url}: " + (f"its data variables {list(skipped)} were read whole at open "
                                                       f"({why})" if skipped else "it has no data variables"), 1)
    if skipped:
        print(f"skipped {list(skipped)}: {why}, read whole at open")
    return names


def bench(args: argparse.Namespace) -> int:
    import dask
    from dask.diagnostics import ProgressBar

    from xarray_zarrmax.core.accounting import request_counts

    _options(args.option)
    for i, name in enumerate(args.variable or ()):
        if name in args.variable[:i]:
            raise Refused(f"--variable {name!r} given twice; expected each variable once")
    ds = _open(args, {})
    names = _bench_names(args, ds)
    arrays = [ds.variables[n].data for n in names]
    nbytes = sum(a.nbytes for a in arrays)
    task_bytes = get_config().task_bytes
    tasks = f"grouped up to {task_bytes / 2**20:g} MiB a task" if task_bytes else "one per stored object"
    print(f"reading {len(names)} variable(s), {nbytes / 1e9:.3f} GB, "
          f"{sum(a.npartitions for a in arrays)} task(s) ({tasks}) on {args.workers} threads")
    start = time.perf_counter()
    with request_counts() as counts, dask.config.set(scheduler="threads", num_workers=args.workers), \
            ProgressBar(out=sys.stderr, dt=0.2):
        # sum each block where it was read: measures the read, not the concatenation of a result
        dask.compute(*(a.map_blocks(_block_nbytes, chunks=(1,) * a.ndim, dtype="i8").sum() for a in arrays))
    elapsed = max(time.perf_counter() - start, 1e-9)
    print(f"read {nbytes / 1e9:.3f} GB in {elapsed:.3f} s: {nbytes / elapsed / 1e9:.2f} GB/s; "
          f"{counts.total('get')} GET requests, {counts.total('bytes') / 1e9:.3f} GB fetched")
    return 0


def _weighted(text: str, flag: str) -> tuple[str, float, str]:
    """``NAME:WEIGHT`` (``--pattern``) or ``NAME:WEIGHT:SELECTION`` (``--select``), the weight a positive number."""
    name, sep, rest = text.partition(":")
    weight, more, selection = rest.partition(":")
    usage = "NAME:WEIGHT" if flag == "--pattern" else SELECT_USAGE
    example = "timeseries:0.5" if flag == "--pattern" else "box:0.5:time=0:100,lat=3"
    try:
        value = float(weight)
    except ValueError:
        value = math.nan
    if not sep or not name or math.isnan(value) or (more and flag == "--pattern"):
        raise Refused(f"{flag} {text!r}: expected {usage} with a number WEIGHT, e.g. {example}")
    if not (math.isfinite(value) and value > 0):
        raise Refused(f"{flag} {text!r}: expected a positive WEIGHT. Got {weight!r}.")
    return name, value, selection


def _parts(text: str, spec: str, flag: str, usage: str) -> dict[str, str]:
    """``DIM=VALUE,...`` as {dim: value}, each dimension once."""
    out: dict[str, str] = {}
    for part in filter(None, spec.split(",")):
        dim, sep, value = part.partition("=")
        if not sep or not dim:
            raise Refused(f"{flag} {text!r}: expected {usage}. Got {part!r}.")
        if dim in out:
            raise Refused(f"{flag} {text!r}: dimension {dim!r} given twice")
        out[dim] = value
    return out


def _selection(text: str, spec: str) -> dict[str, slice | int]:
    """``time=0:100,lat=3`` as {"time": slice(0, 100), "lat": 3}: its syntax (see `_check_selection`)."""
    out: dict[str, slice | int] = {}
    for dim, bounds in _parts(text, spec, "--select", "DIM=INDEX or DIM=START:STOP").items():
        try:
            if ":" in bounds:
                a, _, b = bounds.partition(":")
                out[dim] = slice(int(a) if a else None, int(b) if b else None)
            else:
                out[dim] = int(bounds)
        except ValueError:
            raise Refused(f"--select {text!r}: expected DIM=INDEX or DIM=START:STOP in whole numbers for dimension "
                          f"{dim!r}. Got {bounds!r}.") from None
    return out


def _window(text: str | None) -> dict[str, int] | None:
    """``--batch-window time=8,lat=32`` as {"time": 8, "lat": 32}."""
    if text is None:
        return None
    out: dict[str, int] = {}
    for dim, size in _parts(text, text, "--batch-window", "DIM=SIZE[,DIM=SIZE]").items():
        try:
            out[dim] = int(size)
        except ValueError:
            raise Refused(f"--batch-window {text!r}: expected DIM=SIZE for dimension {dim!r}. Got {size!r}.") from None
        if out[dim] < 1:
            raise Refused(f"--batch-window {text!r}: expected a window size >= 1 for dimension {dim!r}. "
                          f"Got {out[dim]}.")
    return out or None


def _patterns(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, tuple[str, dict[str, slice | int]]]]:
    """The pattern mix of ``--pattern`` and ``--select``, each name once, and each ``--select``'s text and box."""
    from xarray_zarrmax.advise.patterns import KNOWN_PATTERNS

    patterns: dict[str, Any] = {}
    given: dict[str, str] = {}
    selects: dict[str, tuple[str, dict[str, slice | int]]] = {}
    for flag, texts in (("--pattern", args.pattern), ("--select", args.select)):
        for text in texts:
            name, weight, spec = _weighted(text, flag)
            if name in given:
                raise Refused(f"pattern {name!r} given twice ({given[name]}, {flag} {text!r}); expected each "
                              "pattern once")
            given[name] = f"{flag} {text!r}"
            if flag == "--pattern":
                if name not in KNOWN_PATTERNS:
                    raise Refused(f"--pattern {text!r}: unknown pattern {name!r}; expected one of "
                                  f"{', '.join(KNOWN_PATTERNS)}, or --select {SELECT_USAGE} for a box of your own")
                patterns[name] = weight
            else:
                selection = _selection(text, spec)
                patterns[name] = (weight, selection)
                selects[name] = (text, selection)
    if not patterns:
        raise Refused(f"expected at least one --pattern NAME:WEIGHT or --select {SELECT_USAGE}, e.g. --pattern "
                      "timeseries:0.5 --pattern map:0.5")
    return patterns, selects


def _check_selection(text: str, selection: Mapping[str, slice | int], variable: Hashable,
                     sizes: Mapping[Any, int]) -> None:
    """A ``--select`` box inside the variable: a dimension it has, an index in it, a slice within it that
    selects something (both bounds from -n to n: a bound past the end is a mistake, not "to the end")."""
    where = f"--select {text!r}"
    for dim, key in selection.items():
        if dim not in sizes:
            raise Refused(f"{where}: dimension {dim!r} is not one of {variable!r}'s {tuple(map(str, sizes))}")
        n = int(sizes[dim])
        if isinstance(key, int):
            if not -n <= key < n:
                raise Refused(f"{where}: index {key} is outside dimension {dim!r} of {variable!r} (length {n}); "
                              f"expected an index from {-n} to {n - 1}")
            continue
        shown = f"{'' if key.start is None else key.start}:{'' if key.stop is None else key.stop}"
        expected = f"expected START < STOP, both from {-n} to {n} (either may be left out)"
        if any(b is not None and not -n <= b <= n for b in (key.start, key.stop)):
            raise Refused(f"{where}: slice {shown} reaches outside dimension {dim!r} of {variable!r} (length {n}); "
                          f"{expected}")
        start, stop, _ = key.indices(n)
        if stop <= start:
            raise Refused(f"{where}: slice {shown} of dimension {dim!r} of {variable!r} (length {n}) selects "
                          f"nothing; {expected}")


def advise(args: argparse.Namespace) -> int:
    from xarray_zarrmax.advise.advisor import advise as run_advice
    from xarray_zarrmax.advise.advisor import advised_variables
    from xarray_zarrmax.advise.patterns import Batch
    from xarray_zarrmax.advise.probe import probe_place

    patterns, selects = _patterns(args)
    window = _window(args.batch_window)
    storage_options = _options(args.option) or None
    costs = _saved_costs(args.costs) if args.costs else None  # before the store is opened: a mistyped path fails fast
    if args.save_costs:
        _check_writable(args.save_costs, "--save-costs")  # before the probe, which a failed write would lose
    ds = _open(args, None)
    variable, _ = advised_variables(ds, args.variable)
    sizes = ds[variable].sizes
    for text, selection in selects.values():
        _check_selection(text, selection, variable, sizes)
    for dim in window or ():
        if dim not in sizes:
            raise Refused(f"--batch-window {args.batch_window!r}: dimension {dim!r} is not one of {variable!r}'s "
                          f"{tuple(map(str, sizes))}")
    # next to the store, not inside it: a probe cut short leaves nothing in the Zarr hierarchy
    probe = None if args.no_probe or args.costs else (args.probe or probe_place(args.url))
    report = run_advice(ds, patterns, variable=variable, store=probe, storage_options=storage_options,
                        budget_mb=args.budget_mb, max_object_mb=args.max_object_mb, max_objects=args.max_objects,
                        costs=costs, batch=Batch(args.batch_count, window), progress=True)
    print(report)
    if args.save_costs:
        try:
            report.costs.save(args.save_costs)
        except OSError as err:  # checked before the probe, but the folder can change while it runs
            raise Refused(f"--save-costs {args.save_costs!r}: cannot write it ({err.strerror or err}); the advice "
                          "above stands, its costs were not saved", 1) from None
        print(f"costs saved to {args.save_costs} (reuse them with --costs {args.save_costs})")
    if args.top:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(report.table.head(args.top).to_string())
    return 0


def _saved_costs(path: str) -> Any:
    """The costs saved at ``path`` (``--save-costs``, `Costs.save`); a file that is not there, or not costs,
    is a command line to change."""
    from xarray_zarrmax.advise.model import Costs
    from xarray_zarrmax.errors import AdviceInputError

    try:
        return Costs.load(path)
    except OSError as err:
        raise Refused(f"--costs {path!r}: cannot read it ({err.strerror or err}); expected a file written by "
                      "--save-costs") from None
    except AdviceInputError as err:
        raise Refused(f"--costs {path!r}: {err}") from None


def _check_writable(path: str, flag: str) -> None:
    """A file ``flag`` will write at ``path``: not a folder, in a folder that exists and can be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise Refused(f"{flag} {path!r} is a folder; expected the path of a file to write, e.g. {flag} costs.json")
    if not os.path.isdir(folder):
        raise Refused(f"{flag} {path!r}: its folder {folder!r} does not exist (or is no folder); expected a file "
                      "in an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise Refused(f"{flag} {path!r}: cannot write {'it' if os.path.exists(path) else 'in ' + repr(folder)}; "
                      "expected a file this user may write")


def _block_nbytes(block: Any) -> Any:
    import numpy as np

    return np.full((1,) * block.ndim, block.nbytes, dtype="i8")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="zarrmax", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("info", "variables, layouts and open cost of a store"),
                            ("bench", "time a full read with a progress bar"),
                            ("advise", "rank chunk and shard layouts for a mix of access patterns")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("url")
        p.add_argument("--group")
        p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                       help="storage option, e.g. -o endpoint=http://127.0.0.1:9000 -o region=us-east-1")
        if name == "bench":
            p.add_argument("--variable", action="append", help="variable to read (default: all data variables "
                           "but those read whole at open)")
            p.add_argument("--workers", type=_whole(1), default=16, help="dask threads (default: 16)")
        if name == "advise":
            p.add_argument("--pattern", action="append", default=[], metavar="NAME:WEIGHT",
                           help="timeseries, map, region-mean, map-mean, full-scan or random-batch, with a weight")
            p.add_argument("--select", action="append", default=[], metavar=SELECT_USAGE,
                           help="a pattern of your own: a box of index ranges (or indexes) per dimension")
            p.add_argument("--variable", help="data variable to advise on (default: the largest)")
            probing = p.add_mutually_exclusive_group()
            probing.add_argument("--probe", metavar="URL", help="where to probe the store (default: the folder "
                                 "holding URL; a few objects under a fresh prefix, deleted after)")
            probing.add_argument("--no-probe", action="store_true", help="assume a remote object store's costs")
            probing.add_argument("--costs", metavar="FILE.json", help="costs saved by --save-costs (or "
                                 "Costs.save): nothing probed, the saved store kind's rules kept")
            p.add_argument("--save-costs", metavar="FILE.json", help="write the costs used (probed or loaded) "
                           "as JSON, to pass back with --costs")
            p.add_argument("--budget-mb", type=_megabytes, help="most memory a dask task may use to read one object")
            p.add_argument("--max-object-mb", type=_megabytes, help="largest stored object")
            p.add_argument("--max-objects", type=_whole(1), help="most stored objects for the variable")
            p.add_argument("--batch-window", metavar="DIM=SIZE,...",
                           help="random-batch window (default: 8 time steps, 32 cells along other dimensions)")
            p.add_argument("--batch-count", type=_whole(1), default=16, help="random-batch windows (default: 16)")
            p.add_argument("--top", type=_whole(0), default=0, help="also print the table's first N rows")
    return parser


def _one_line(err: BaseException, secrets: Sequence[str]) -> str:
    """An error's message and notes on one line, credentials masked."""
    args = err.args
    text = args[0] if isinstance(err, KeyError) and len(args) == 1 and isinstance(args[0], str) else str(err)
    notes = [str(n) for n in getattr(err, "__notes__", ())]
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    if notes:
        line += " (" + "; ".join(" ".join(n.split()) for n in notes) + ")"
    return redact(line, secrets)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    secrets = _secrets(_option_values(argv))
    command = "zarrmax"

    def show_warning(message: Any, category: type[Warning], *_: Any, **__: Any) -> None:
        print(f"zarrmax: warning: {category.__name__}: {_one_line(Exception(str(message)), secrets)}",
              file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show_warning  # each warning one line too
        try:
            args = parser.parse_args(argv)
            command = f"zarrmax {args.command}"
            return {"info": info, "bench": bench, "advise": advise}[args.command](args)
        except Refused as err:
            print(f"{err.prog or command}: {_one_line(err, secrets)}", file=sys.stderr)
            return err.status
        except KeyboardInterrupt:
            print(f"{command}: interrupted", file=sys.stderr)
            return 130
        except USER_ERRORS as err:
            # errors from zarr-python (arrays it reads for us) are not masked where they arise: here they are
            print(f"zarrmax: {type(err).__name__}: {_one_line(err, secrets)}", file=sys.stderr)
            return 1


def _option_values(argv: Sequence[str]) -> list[str]:
    """The ``-o`` pairs of a command line, also of one argparse refused (their credentials are masked in any
    message)."""
    pairs = []
    for i, arg in enumerate(argv):
        if arg in ("-o", "--option") and i + 1 < len(argv):
            pairs.append(argv[i + 1])
        elif arg.startswith("--option="):
            pairs.append(arg.removeprefix("--option="))
        elif arg.startswith("-o") and not arg.startswith("--"):
            pairs += [arg[2:], arg[2:].removeprefix("=")]  # -oKEY=VALUE; -o=KEY=VALUE
    return pairs

if __name__ == "__main__":
    raise SystemExit(main())
