"""An MkDocs hook: links from a page to files of the repository outside ``docs/``.

The guides link to scripts such as ``../examples/dqn_per_torch.py`` so that they read well in a
checkout. MkDocs only knows the files under ``docs/``, so such a link would be reported as
broken. This hook copies each linked repository file into the site under ``repository/`` (the
same relative path as in the checkout) and points the link at that copy. Links to files that do
not exist are left alone, so MkDocs still reports them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

# A Markdown link or image target: ](target) or ](target "title"), without a scheme.
_LINK = re.compile(r"\]\((?P<target>[^)\s#:]+)(?P<anchor>#[^)\s]*)?(?P<title>\s+\"[^\"]*\")?\)")
_PREFIX = "repository"


def _outside(docs: Path, page_src: str, target: str) -> Path | None:
    """The repository file ``target`` (relative to page ``page_src``) names, if outside docs."""
    path = (docs / page_src).parent.joinpath(target).resolve()
    root = docs.parent.resolve()
    if path.is_relative_to(docs.resolve()) or not path.is_relative_to(root) or not path.is_file():
        return None
    return path.relative_to(root)


def on_files(files: Files, config: Any) -> Files:
    docs = Path(config["docs_dir"])
    wanted: set[Path] = set()
    for file in files.documentation_pages():
        text = Path(file.abs_src_path).read_text(encoding="utf-8")
        for match in _LINK.finditer(text):
            found = _outside(docs, file.src_uri, match["target"])
            if found is not None:
                wanted.add(found)
    for rel in sorted(wanted):
        files.append(
            File.generated(
                config,
                f"{_PREFIX}/{rel.as_posix()}",
                abs_src_path=str(docs.parent.resolve() / rel),
            )
        )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    docs = Path(config["docs_dir"])
    depth = len(Path(page.file.src_uri).parent.parts)

    def rewrite(match: re.Match[str]) -> str:
        found = _outside(docs, page.file.src_uri, match["target"])
        if found is None:
            return match.group(0)
        target = "../" * depth + f"{_PREFIX}/{found.as_posix()}"
        return f"]({target}{match['anchor'] or ''}{match['title'] or ''})"

    return _LINK.sub(rewrite, markdown)
