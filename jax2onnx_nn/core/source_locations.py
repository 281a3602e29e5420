"""Source locations in node doc strings without the paths of the machine that exported.

While lowering, a node's doc string is the absolute location of the line that made it
(``/home/ann/proj/model.py:12:8 (__call__)``): error messages and warnings name it so that
an editor opens it. A model is shipped to other machines, so before it is returned the
locations are made portable (:func:`portable_path`): relative to the installed packages
(``flax/nnx/nn/linear.py``), the current directory, or the user's project root, else the
file name alone; or left out with ``source_locations=False``.
"""

from __future__ import annotations

import functools
import os
import re

import onnx_ir as ir

from jax2onnx_nn.core.ir.walk import all_nodes

_PACKAGE_DIRS = ("site-packages", "dist-packages")
_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# "<path>:<line>[:<column>] (<function>)": the path is what precedes the first ":<digits>"
# followed by ":", " " or the end (a Windows drive "C:\" is not one)
_LOCATION = re.compile(r"^(?P<path>.+?)(?P<rest>:\d+(?::\d+)?(?: \(.*\))?)$", re.DOTALL)


def portable_path(path: str) -> str:
    """``path`` without the folders of this machine: the part after the last
    ``site-packages`` / ``dist-packages`` folder (``flax/nnx/module.py``), else relative to
    the current directory when it is inside it, else relative to the project root above it
    (the nearest folder with a ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or ``.git``,
    short of the home directory), else the file name. Relative and non-file names
    (``<stdin>``) are returned as they are."""
    if not os.path.isabs(path):
        return path
    return _portable(path, os.getcwd())


@functools.lru_cache(maxsize=4096)
def _portable(path: str, cwd: str) -> str:
    parts = os.path.normpath(path).split(os.sep)
    installed = [i for i, part in enumerate(parts) if part in _PACKAGE_DIRS]
    if installed and installed[-1] < len(parts) - 1:
        return "/".join(parts[installed[-1] + 1 :])
    for base in (cwd, _project_root(os.path.dirname(path))):
        if base and _is_within(path, base):
            return os.path.relpath(path, base).replace(os.sep, "/")
    return os.path.basename(path)


def _project_root(folder: str) -> str | None:
    home = os.path.expanduser("~")
    while True:
        if folder == home:
            return None
        if any(os.path.exists(os.path.join(folder, marker)) for marker in _PROJECT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _is_within(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == os.path.normpath(folder)
    except ValueError:  # another drive
        return False


def portable_location(location: str) -> str:
    """A doc string ``<path>:<line>[:<column>] (<function>)`` with :func:`portable_path`
    applied to its path; any other text unchanged."""
    match = _LOCATION.match(location)
    if match is None:
        return location
    return portable_path(match["path"]) + match["rest"]


def set_source_locations(model: ir.Model, keep: bool) -> None:
    """Make the node doc strings of ``model`` (functions and subgraphs too) portable, or
    clear them when ``keep`` is false (``ExportConfig.source_locations``)."""
    done: dict[str, str] = {}
    for node, _ in all_nodes(model):
        doc = node.doc_string
        if doc:
            node.doc_string = (
                (done.get(doc) or done.setdefault(doc, portable_location(doc))) if keep else None
            )
