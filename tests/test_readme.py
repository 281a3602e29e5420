"""The README stays true: its support table is the registry's, its commands are the real ones."""

import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_support_table", ROOT / "scripts" / "gen_support_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_support_table_is_generated_from_the_registry():
    gen = _generator()
    text = (ROOT / "README.md").read_text()
    assert gen.updated(text) == text, "README support table is stale: run python scripts/gen_support_table.py"


def test_support_table_lists_core_primitives():
    table = _generator().render()
    for prim in ("add", "dot_general", "reshape", "reduce_sum", "convert_element_type"):
        assert f"| `{prim}` |" in table


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in ci
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- test-command -->", 1)[1].split("```")[1]
    assert "pytest" in block


def test_cli_ops_lists_the_registry():
    out = subprocess.run([sys.executable, "-m", "jax2onnx_nn", "ops"], capture_output=True, text=True, check=True).stdout
    assert "dot_general" in out and "MatMul" in out
