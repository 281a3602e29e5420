"""The README and the docs pages stay true: the support table is the registry's, the commands
and examples are the real ones, the README is the front door (short, linking the pages)."""

import ast
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]


DOCS = ROOT / "docs"


def _pages():
    """README.md and every docs page."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _example(name):
    """The code block after ``<!-- example: name -->`` in the README or a docs page."""
    marker = f"<!-- example: {name} -->"
    (text,) = [t for t in (p.read_text() for p in _pages()) if marker in t]
    return text.split(marker, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_support_table", ROOT / "scripts" / "gen_support_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_support_table_is_generated_from_the_registry():
    # in a fresh process: this test session's registry also holds rules that tests registered
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_support_table.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_support_table_has_a_tested_column_from_the_record():
    table = _generator().render()
    record = (ROOT / "tests" / "lowered_primitives.txt").read_text().split()
    assert table.splitlines()[0] == "| JAX primitive | ONNX ops | min opset | tested |"
    assert "| `add` | Add | 13 | yes |" in table and "add" in record
    untested = [line for line in table.splitlines() if line.endswith("| no |")]
    assert all(line.split("`")[1] not in record for line in untested)


def test_support_table_lists_core_primitives():
    table = _generator().render()
    for prim in ("add", "dot_general", "reshape", "reduce_sum", "convert_element_type"):
        assert f"| `{prim}` |" in table


def test_support_table_lists_modules_with_their_coarse_ops():
    from jax2onnx_nn.testing.support import module_rows

    table = _generator().render()
    record = set((ROOT / "tests" / "lowered_primitives.txt").read_text().split())
    # every op the coarse op emits (recorded in tests/emitted_ops.txt): the Cast of mixed
    # dtypes, the Squeeze/Unsqueeze of an unbatched Equinox call
    rows = (
        "| `nnx.Linear` | Gemm, MatMul, Add, Cast | 13 |",
        "| `eqx.nn.Conv2d` | Conv, Reshape, Squeeze, Unsqueeze | 13 |",
        "| `jax.nn.gelu` | Gelu | 20 |",
    )
    for line in rows:
        assert line in table
    for row in module_rows():  # "yes" exactly when a passing test lowered the module's coarse op
        expected = "-" if row.primitive is None else "yes" if row.primitive in record else "no"
        assert any(
            line.startswith(f"| `{row.target}` |") and line.endswith(f"| {expected} |")
            for line in table.splitlines()
        ), row


def test_every_example_is_listed():
    page = (DOCS / "examples.md").read_text()
    examples = sorted(p.name for p in (ROOT / "examples").glob("*.py") if p.name != "__init__.py")
    assert [name for name in examples if f"`examples/{name}`" not in page] == []


def test_the_readme_is_a_front_door_linking_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 400
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert "docs/support.md" in links and "docs/getting-started/keras.md" in links
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_the_docs_nav_keeps_pages_that_exist_and_adds_the_others(tmp_path):
    spec = importlib.util.spec_from_file_location("mkdocs_nav", ROOT / "scripts" / "mkdocs_nav.py")
    nav = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nav)
    for page in ("index.md", "a/b.md", "extra.md"):
        (tmp_path / page).parent.mkdir(exist_ok=True)
        (tmp_path / page).write_text("# x\n")
    listed = [{"Home": "index.md"}, {"Guide": [{"B": "a/b.md"}, {"Not built": "missing.md"}]}]
    config = {"docs_dir": str(tmp_path), "nav": [*listed, {"Gone": "gone.md"}]}
    expected = [{"Home": "index.md"}, {"Guide": [{"B": "a/b.md"}]}, {"More": ["extra.md"]}]
    assert nav.on_config(config)["nav"] == expected


def test_the_getting_started_examples_run(tmp_path):
    # one per framework, each a complete program; in one fresh process (imports shared)
    names = ("functions", "flax-nnx", "flax-linen", "equinox", "keras")
    runner = "\n".join(
        f"exec(compile({_example(name)!r}, {name!r}, 'exec'), {{}})" for name in names
    )
    (tmp_path / "examples.py").write_text(runner + "\nprint('all ran')\n")
    result = subprocess.run(
        [sys.executable, "examples.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0 and "all ran" in result.stdout, result.stderr[-3000:]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in ci
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- test-command -->", 1)[1].split("```")[1]
    assert (
        "pytest" in block and "npm ci" in block
    )  # onnxruntime-web's tests run for README users too
    before = ci.split('bash -c "$test_cmd"', 1)[0]
    commands = [line for line in before.splitlines() if not line.lstrip().startswith("#")]
    assert not [c for c in commands if re.search(r"\b(npm|pip)\b", c)], (
        "CI installs what the README's command does not"
    )


def test_cli_ops_lists_the_registry():
    out = subprocess.run(
        [sys.executable, "-m", "jax2onnx_nn", "ops"], capture_output=True, text=True, check=True
    ).stdout
    assert "dot_general" in out and "MatMul" in out


# A ```python block preceded by this comment is not run (keep it rare: a GPU, a download).
SNIPPET_SKIP = re.compile(r"<!--\s*snippet:\s*skip\s*(?P<reason>.*?)\s*-->\s*$")
SNIPPET_RUNNER = """
import json, os, sys, traceback

snippets = json.load(open(sys.argv[1]))
results = {}
for snippet in snippets:
    os.chdir(snippet["dir"])
    try:
        exec(compile(snippet["code"], snippet["id"], "exec"), {"__name__": "__main__"})
        results[snippet["id"]] = None
    except BaseException:
        results[snippet["id"]] = traceback.format_exc()
json.dump(results, open(sys.argv[2], "w"))
"""


def _doc_files() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _snippets() -> list[tuple[str, str, str | None]]:
    """Every ```python block of the README and docs/: ``(file:line, code, skip reason)``."""
    found = []
    for path in _doc_files():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() != "```python":
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
            marker = SNIPPET_SKIP.match(lines[i - 1].strip()) if i else None
            found.append(
                (
                    f"{path.relative_to(ROOT)}:{i + 1}",
                    "\n".join(lines[i + 1 : end]) + "\n",
                    marker["reason"] or "marked to skip" if marker else None,
                )
            )
    return found


def _missing_modules(code: str) -> list[str]:
    """Top-level packages the snippet imports that are not installed (an optional extra)."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if importlib.util.find_spec(n) is None)


@pytest.fixture(scope="module")
def snippet_failures(tmp_path_factory) -> dict[str, str | None]:
    """Runs every runnable snippet once, each in a fresh namespace and its own empty folder,
    in one child process (a snippet registers rules: they must not leak into this session):
    snippet id -> the traceback it raised, or None."""
    work = tmp_path_factory.mktemp("snippets")
    runnable = []
    for n, (snippet_id, code, skip) in enumerate(_snippets()):
        if skip is None and not _missing_modules(code):
            (work / str(n)).mkdir()
            runnable.append({"id": snippet_id, "code": code, "dir": str(work / str(n))})
    (work / "snippets.json").write_text(json.dumps(runnable))
    (work / "runner.py").write_text(SNIPPET_RUNNER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax"}
    result = subprocess.run(
        [sys.executable, "runner.py", "snippets.json", str(work / "results.json")],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    return json.loads((work / "results.json").read_text())


@pytest.mark.parametrize("snippet_id, code, skip", _snippets(), ids=[s[0] for s in _snippets()])
def test_every_snippet_runs_alone(snippet_id, code, skip, snippet_failures):
    """Each ```python block of the README and docs/*.md runs by itself (its own imports, no
    names from an earlier block), in an empty folder."""
    if skip is not None:
        pytest.skip(f"{snippet_id}: {skip}")
    missing = _missing_modules(code)
    if missing:
        pytest.skip(
            f"{snippet_id} needs {', '.join(missing)} (an optional extra: the README's Install)"
        )
    failure = snippet_failures[snippet_id]
    assert failure is None, f"{snippet_id} fails when run alone:\n{failure}"


def test_fixture_example_passes(pytester):
    pytester.makepyfile(test_example=_example("fixture-tests"))
    installed = any(
        ep.name == "jax2onnx_nn" for ep in importlib.metadata.entry_points(group="pytest11")
    )
    plugin = [] if installed else ["-p", "jax2onnx_nn.testing.plugin"]
    pytester.runpytest("-p", "no:cacheprovider", *plugin).assert_outcomes(passed=3)


def test_every_onnx_op_a_rule_emitted_in_the_tests_is_declared():
    """The ONNX ops column is the rules' ``onnx_ops=``; the recording plugin wrote down the ops
    each built-in rule really emitted in passing tests (``tests/emitted_ops.txt``)."""
    from jax2onnx_nn.core import registry
    from jax2onnx_nn.testing.coverage import EMITTED_NAME, read_emitted
    from jax2onnx_nn.testing.support import module_rows

    module_rows()  # imports the installed adapters: their coarse ops are registered then
    emitted = read_emitted(ROOT / "tests" / EMITTED_NAME)
    assert emitted and "dot_general" in emitted
    undeclared = {}
    for name, ops in sorted(emitted.items()):
        if registry.layer_of(name) in (None, registry.USER):
            continue  # an adapter that is not installed, or a rule a test registered
        # an activation after a layout Transpose moves that Transpose after itself (the first
        # one is left without users): no node of its own
        moved = {"Transpose"} if name.startswith("jax_nn_") else set()
        missing = ops - set(registry.lookup(name).onnx_ops) - moved
        if missing:
            undeclared[name] = sorted(missing)
    assert undeclared == {}, "declare these in the rules' onnx_ops= (or stop emitting them)"
