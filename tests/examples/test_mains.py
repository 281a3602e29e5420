"""Every example runs the way docs/examples.md says: ``python -m examples.NAME out.onnx`` from a
checkout writes out.onnx, prints onnxruntime-vs-JAX reports that all agree, and ends."""

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if p.stem != "__init__")
FAST = {"heat_equation"}  # the others are exported and verified in their own tests too


@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in EXAMPLES]
)
def test_example_main_writes_the_promised_file_and_verifies(name, tmp_path):
    out = tmp_path / f"{name}.onnx"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-m", f"examples.{name}", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert out.exists(), f"examples.{name} did not write {out}: {os.listdir(tmp_path)}"
    onnx.checker.check_model(onnx.load(out))
    assert " ok" in run.stdout and "MISMATCH" not in run.stdout, run.stdout[-3000:]


def test_every_example_has_a_main():
    for name in EXAMPLES:
        assert (
            'if __name__ == "__main__":\n    main(*sys.argv[1:])'
            in (ROOT / "examples" / f"{name}.py").read_text()
        ), name
