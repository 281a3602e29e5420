"""Node doc strings carry source lines without the exporting machine's paths."""

import importlib.util
import os
import sys
import textwrap

import onnx
import pytest

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.source_locations import portable_location, portable_path

USER_MODEL = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp


    def model(x):
        y = jnp.tanh(x) * 2.0
        y = jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) + i, y)  # a Loop: a body graph
        return jax.nn.softmax(y, axis=-1)
    """
)


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc_strings(model: onnx.ModelProto) -> list[str]:
    """The doc strings of every node: main graph, subgraphs, function bodies."""
    docs = []

    def walk(nodes):
        for node in nodes:
            docs.append(node.doc_string)
            for attr in node.attribute:
                for graph in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    walk(graph.node)

    walk(model.graph.node)
    for function in model.functions:
        walk(function.node)
    return docs


@pytest.fixture
def user_file(tmp_path):
    """A user's model file in a folder outside the current directory and any project."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    path = folder / "model.py"
    path.write_text(USER_MODEL)
    assert not str(path).startswith(os.getcwd())
    return path


def test_a_users_model_carries_no_absolute_path_and_no_home_directory(user_file):
    model = to_onnx(_load(user_file, "model_elsewhere").model, [("B", 4)])
    docs = _doc_strings(model)
    assert len(docs) >= 4 and all(doc.startswith("model.py:") for doc in docs), docs
    assert any("(model)" in doc for doc in docs) and any("<lambda>)" in doc for doc in docs), docs
    serialized = model.SerializeToString()
    for machine_path in (str(user_file.parent), os.path.expanduser("~"), os.getcwd(), sys.prefix):
        assert machine_path.encode() not in serialized, machine_path


def test_paths_are_relative_to_the_current_directory_or_the_project(
    user_file, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    model = to_onnx(_load(user_file, "model_below_cwd").model, [("B", 4)])
    docs = _doc_strings(model)
    assert docs and all(doc.startswith("elsewhere/model.py:") for doc in docs), docs

    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    assert portable_path(str(project / "src" / "model.py")) == "project/src/model.py"  # below cwd
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    assert portable_path(str(project / "src" / "model.py")) == "src/model.py"


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/opt/venv/lib/python3.12/site-packages/flax/nnx/nn/linear.py", "flax/nnx/nn/linear.py"),
        ("/usr/lib/python3/dist-packages/equinox/_module.py", "equinox/_module.py"),
        ("<stdin>", "<stdin>"),
        ("model.py", "model.py"),
    ],
)
def test_installed_packages_are_named_from_the_package(path, expected):
    assert portable_path(path) == expected
    assert portable_location(f"{path}:12:8 (__call__)") == f"{expected}:12:8 (__call__)"


def test_source_locations_false_leaves_them_out(user_file):
    model = to_onnx(_load(user_file, "model_no_lines").model, [("B", 4)], source_locations=False)
    docs = _doc_strings(model)
    assert docs and not any(docs), docs
