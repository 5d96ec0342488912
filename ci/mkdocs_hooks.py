"""MkDocs hooks for the documentation site (mkdocs.yml ``hooks:``; built by ci/docs.sh).

The pages under docs/ are also read on their own, in a checkout or on a forge, so they link the way files link:
to README.md, to CHANGELOG.md, to source files and to folders. On the site, those links are rewritten here:

- README.md and its anchors go to the site page that now holds that part of the README (`README_ANCHORS`);
- CHANGELOG.md goes to changelog.md, whose text is CHANGELOG.md itself (``<!-- include: CHANGELOG.md -->``);
- a source file with a page in the API reference goes to that page (`SOURCE_PAGES`); any other file of the
  repository outside docs/ becomes its path as code (the site has no source browser);
- a folder inside docs/ goes to its index.md.

A link to a README anchor, folder or file that does not exist is a warning, so ``mkdocs build --strict`` fails on
it as it does on any broken link. ``<!-- zarrmax-help: SUBCOMMAND -->`` becomes the installed ``zarrmax`` command's
own help, so the command-line reference cannot drift from the parser; ``<!-- tuning-numbers -->`` becomes the
numbers of xarray_zarrmax/tuning.py with the comment that says why each is what it is.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import posixpath
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.zarrmax")  # under "mkdocs": --strict counts its warnings

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

#: README.md#anchor -> the docs page (relative to docs/) that holds that part of the README now.
README_ANCHORS = {
    "": "index.md",
    "what-it-accepts": "guide/overview.md#what-it-accepts",
    "settings": "guide/differences.md#dask-chunks",
    "command-line": "guide/cli.md",
    "gpus-and-clusters": "guide/overview.md#gpus-and-clusters-in-short",
    "errors": "guide/errors.md",
    "same-answers-also-when-the-data-changes": "guide/overview.md#what-you-can-rely-on",
    "benchmarks": "dev/contributing.md#benchmarks",
    "layout": "dev/contributing.md#the-repository",
    "two-commands-on-a-fresh-machine": "dev/contributing.md#two-commands-on-a-fresh-machine",
}

#: Source files (relative to the repository) -> their page in the API reference (relative to docs/).
SOURCE_PAGES = {
    "xarray_zarrmax/tuning.py": "api/internals.md#xarray_zarrmax.tuning",
    "xarray_zarrmax/config.py": "api/settings.md",
    "xarray_zarrmax/errors.py": "api/errors.md",
    "xarray_zarrmax/cli.py": "api/cli.md",
}

LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^)\s]+)(\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INCLUDE = re.compile(r"^<!-- include: (\S+) -->\s*$", re.MULTILINE)
HELP = re.compile(r"^<!-- zarrmax-help:\s*(\S*)\s*-->\s*$", re.MULTILINE)


def _outside_code(markdown: str, edit: Any) -> str:
    """``edit(line)`` applied to every line outside fenced code blocks."""
    out, fenced = [], False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
        else:
            out.append(line if fenced else edit(line))
    return "".join(out)


def _relative(target: Path, page_dir: Path) -> str:
    return Path(os.path.relpath(target, page_dir)).as_posix()


def rewrite_links(markdown: str, *, page: str, base: Path | None = None) -> str:
    """The links of ``markdown`` (on docs page ``page``; relative to folder ``base``, the page's own folder by
    default) as they work on the site."""
    page_dir = (DOCS / page).parent
    base = page_dir if base is None else base

    def one(match: re.Match[str]) -> str:
        bang, text, target, title = match.group(1), match.group(2), match.group(3), match.group(4) or ""
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = Path(posixpath.normpath((base / path).as_posix())) if path else DOCS / page
        hash_anchor = f"#{anchor}" if anchor else ""
        if resolved == DOCS or DOCS in resolved.parents:
            if resolved.is_dir():
                index = resolved / "index.md"
                if not index.is_file():
                    log.warning("Doc file '%s' links to folder '%s', which has no index.md", page, target)
                    return match.group(0)
                return f"{bang}[{text}]({_relative(index, page_dir)}{hash_anchor}{title})"
            if base != page_dir:
                return f"{bang}[{text}]({_relative(resolved, page_dir)}{hash_anchor}{title})"
            return match.group(0)
        in_repo = resolved.relative_to(REPO).as_posix() if REPO in resolved.parents else None
        mapped = None
        if in_repo == "README.md":
            mapped = README_ANCHORS.get(anchor)
            if mapped is None:
                log.warning("Doc file '%s' links to README.md#%s, which README_ANCHORS (ci/mkdocs_hooks.py) does "
                            "not map to a page", page, anchor)
                return match.group(0)
        elif in_repo == "CHANGELOG.md":
            mapped = f"changelog.md{hash_anchor}"
        elif in_repo in SOURCE_PAGES:
            mapped = SOURCE_PAGES[in_repo]
        if mapped is not None:
            mapped_path, _, mapped_anchor = mapped.partition("#")
            link = _relative(DOCS / mapped_path, page_dir) + (f"#{mapped_anchor}" if mapped_anchor else "")
            return f"{bang}[{text}]({link}{title})"
        if in_repo is None or not resolved.exists():
            log.warning("Doc file '%s' links to '%s', which is not a file of the repository", page, target)
            return match.group(0)
        shown = in_repo + ("/" if resolved.is_dir() else "")
        return text if shown.rstrip("/") in text else f"{text} (`{shown}`)"

    return _outside_code(markdown, lambda line: LINK.sub(one, line))


def zarrmax_help(subcommand: str) -> str:
    """The installed ``zarrmax`` command's help (of ``subcommand``, or the top level) as a code block."""
    from xarray_zarrmax import cli

    argv = [subcommand, "--help"] if subcommand else ["--help"]
    out = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width: the same on every machine
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            cli.main(argv)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    text = out.getvalue().rstrip()
    if not text.startswith("usage:"):
        log.warning("zarrmax %s gave no usage text: %r", " ".join(argv), text[:200])
    return f"```text\n$ zarrmax {' '.join(argv)}\n{text}\n```"


def on_config(config: Any) -> Any:
    """The docs folder the build reads (mkdocs.yml's ``docs_dir``), for resolving the pages' links."""
    global DOCS
    DOCS = Path(config["docs_dir"]).resolve()
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    source = page.file.src_uri

    def include(match: re.Match[str]) -> str:
        path = REPO / match.group(1)
        if not path.is_file():
            log.warning("Doc file '%s' includes '%s', which does not exist", source, match.group(1))
            return match.group(0)
        return rewrite_links(path.read_text(encoding="utf-8"), page=source, base=path.parent)

    markdown = INCLUDE.sub(include, markdown)
    markdown = HELP.sub(lambda m: zarrmax_help(m.group(1)), markdown)
    markdown = markdown.replace("<!-- tuning-numbers -->", tuning_numbers())
    return rewrite_links(markdown, page=source)


def tuning_numbers() -> str:
    """xarray_zarrmax/tuning.py's numbers as tables, one per section, each with the ``#:`` comment above it (the
    measurement that chose it): mkdocstrings shows attributes' docstrings, not their comments."""
    path = REPO / "xarray_zarrmax" / "tuning.py"
    out: list[str] = []
    comment: list[str] = []
    rows: list[tuple[str, str, str]] = []

    def flush_rows() -> None:
        if rows:
            out.extend(["", "| name | value | why |", "| --- | --- | --- |"])
            for name, value, why in rows:
                cell = why.replace("|", "\\|")
                out.append(f'| <span id="xarray_zarrmax.tuning.{name}"></span>`{name}` | `{value}` | {cell} |')
            out.append("")
            rows.clear()

    last_why = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        section = re.match(r"^# -- (.+?) -+$", stripped)
        assignment = re.match(r"^([A-Z][A-Z0-9_]*)\s*(?::[^=]+)?=\s*(.+)$", line)
        if section:
            flush_rows()
            out.extend(["", f"### {section.group(1)[0].upper()}{section.group(1)[1:]}", ""])
            comment, last_why = [], ""
        elif stripped.startswith("#:"):
            comment.append(stripped[2:].strip())
        elif stripped.startswith("#"):
            flush_rows()
            out.extend(["", stripped.lstrip("#").strip(), ""])
        elif assignment and assignment.group(1) != "MiB":
            if comment:
                last_why = " ".join(comment)
            rows.append((assignment.group(1), assignment.group(2).strip(), last_why))
            comment = []
        elif not stripped:  # a number's comment is the `#:` block right above it, or above its group
            comment, last_why = [], ""
    flush_rows()
    return "\n".join(out)
