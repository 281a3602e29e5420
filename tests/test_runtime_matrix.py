"""The runtime table (docs/runtimes.md) is generated from tests/runtime_matrix.txt, and the record
holds."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from jax2onnx_nn.core.runtimes import missing_reason
from tests.runtime_table import GEN

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORD = GEN.read_record()


def test_runtime_table_is_generated_from_the_record() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_runtime_table.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(RECORD) == {(m, r) for m in GEN.MODELS for r in GEN.RUNTIMES}


def _pairs(models: tuple[str, ...]) -> list:
    return [
        pytest.param(
            m,
            r,
            marks=pytest.mark.skipif(missing_reason(r) is not None, reason=str(missing_reason(r))),
        )
        for m in models
        for r in GEN.RUNTIMES
    ]


# by default a few models that are quick and go through the profiles' rewrites: a plain MLP,
# a fori_loop in float64 (tract's counter state; OpenVINO's float32), ONNX functions inlined,
# a bfloat16 MLP (widened layers; tract's refusal, onnxruntime-web's float32 boundary)
DEFAULT = ("jax_mlp", "heat_fori", "flax_mlp_functions", "flax_mlp_bf16")


@pytest.mark.parametrize(("model", "runtime"), _pairs(DEFAULT))
def test_recorded_results_hold(model: str, runtime: str) -> None:
    assert GEN.check_pair(model, runtime) == RECORD[(model, runtime)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "runtime"), _pairs(tuple(m for m in GEN.MODELS if m not in DEFAULT))
)
def test_full_matrix_holds(model: str, runtime: str) -> None:
    assert GEN.check_pair(model, runtime) == RECORD[(model, runtime)]
