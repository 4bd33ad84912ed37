"""MkDocs hooks: pages of the site that live outside ``docs/``.

The repository's own documents stay where a reader of the repository looks for them,
and the site shows them as they are: ``README.md`` is the site's front page,
``ARCHITECTURE.md`` its architecture page, ``benchmarks/README.md`` and
``benchmarks/TRANSPORT.md`` the benchmarks' full report, with the plots of
``benchmarks/results/``. Their links are written for the repository, so each relative
link is re-pointed at the page or file the site has for it: a document of the table
below, a page or picture of ``docs/``, or a plot. A link to a file of the repository
that the site does not carry (a module, a script) becomes its text; a link to a file
that does not exist is left as it is, so that ``mkdocs build --strict`` fails on it.

``mkdocs.yml`` names this file under ``hooks:``.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
"""The repository."""

PAGES = {
    "README.md": "index.md",
    "ARCHITECTURE.md": "architecture.md",
    "benchmarks/README.md": "benchmarks/report.md",
    "benchmarks/TRANSPORT.md": "benchmarks/transport.md",
}
"""Repository documents shown by the site: repository path -> the site's path."""

ASSETS = ("benchmarks/results/*.svg",)
"""Files of the repository the site carries at the same path (the benchmarks' plots)."""

_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]+)\)")
"""A Markdown link or image ``[text](target)`` (its text may hold one level of brackets)."""

_FENCE = re.compile(r"^(```|~~~)")


def _assets() -> dict[str, str]:
    """Every asset: repository path -> the site's path (the same)."""
    found = {}
    for pattern in ASSETS:
        for path in sorted(ROOT.glob(pattern)):
            rel = path.relative_to(ROOT).as_posix()
            found[rel] = rel
    return found


def site_path(repo_path: str) -> str | None:
    """Where the site has the repository file ``repo_path``, or None."""
    if repo_path in PAGES:
        return PAGES[repo_path]
    if repo_path.startswith("docs/") and (ROOT / repo_path).is_file():
        return repo_path[len("docs/") :]
    return _assets().get(repo_path)


def relink(markdown: str, repo_path: str) -> str:
    """``markdown`` of the repository file ``repo_path`` with its relative links re-pointed
    at the site's pages and files (see the module's docstring). Code blocks are left
    alone."""
    page_dir = posixpath.dirname(PAGES[repo_path])
    source_dir = posixpath.dirname(repo_path)

    def fix(match: re.Match[str]) -> str:
        bang, text, target = match.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
            return match.group(0)  # a URL, an anchor on the same page, an absolute path
        path, _, anchor = target.partition("#")
        repo_target = posixpath.normpath(posixpath.join(source_dir, path))
        found = site_path(repo_target)
        if found is None:
            if (ROOT / repo_target).exists() and not bang:
                return text  # a file the site does not carry: its name, no link
            return match.group(0)  # missing: left for the strict build to report
        rel = posixpath.relpath(found, page_dir or ".")
        return f"{bang}[{text}]({rel}{'#' + anchor if anchor else ''})"

    out: list[str] = []
    prose: list[str] = []  # lines outside code blocks, re-linked together (a link may wrap)
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line.lstrip()):
            if not fenced:
                out.append(_LINK.sub(fix, "".join(prose)))
                prose = []
            fenced = not fenced
            out.append(line)
        elif fenced:
            out.append(line)
        else:
            prose.append(line)
    out.append(_LINK.sub(fix, "".join(prose)))
    return "".join(out)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the repository's documents and the plots to the site's files."""
    for repo_path, site in PAGES.items():
        source = ROOT / repo_path
        files.append(File.generated(config, site, content=relink(source.read_text(), repo_path)))
    for repo_path, site in _assets().items():
        files.append(File.generated(config, site, abs_src_path=str(ROOT / repo_path)))
    return files


_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):<code>(~?)([\w.]+)")
"""A Sphinx role left in a rendered docstring: ``:class:`X``` came out as
``:class:<code>X</code>``."""


def _strip_role(match: re.Match[str]) -> str:
    tilde, name = match.groups()
    return "<code>" + (name.rsplit(".", 1)[-1] if tilde else name)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """The docstrings' Sphinx roles as plain code: ``:class:`~timely.Vertex``` shows as
    ``Vertex``, as Sphinx would show it (the API reference is rendered from Markdown)."""
    return _ROLE.sub(_strip_role, html)
