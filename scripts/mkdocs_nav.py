"""mkdocs hook: the nav lists the pages that exist, and every page that exists.

``mkdocs.yml`` names the pages the site is meant to have; a page another change has not added
yet (or a feature not built yet: quantization, generation) is left out instead of failing
``mkdocs build --strict``, and a ``docs/*.md`` page that the nav does not name goes under
"More" so that it is reachable.
"""

from __future__ import annotations

import pathlib
from typing import Any

NavItem = str | dict[str, Any]


def _existing(items: list[NavItem], docs: pathlib.Path, listed: set[str]) -> list[NavItem]:
    kept: list[NavItem] = []
    for item in items:
        if isinstance(item, str):
            if (docs / item).is_file():
                kept.append(item)
                listed.add(item)
            continue
        ((title, value),) = item.items()
        if isinstance(value, list):
            children = _existing(value, docs, listed)
            if children:
                kept.append({title: children})
        elif (docs / value).is_file():
            kept.append({title: value})
            listed.add(value)
    return kept


def on_config(config: Any, **_: Any) -> Any:
    docs = pathlib.Path(config["docs_dir"])
    listed: set[str] = set()
    nav = _existing(config["nav"] or [], docs, listed)
    others = sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*.md"))
    more = [page for page in others if page not in listed]
    if more:
        nav.append({"More": more})
    config["nav"] = nav
    return config
