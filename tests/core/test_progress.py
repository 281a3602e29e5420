"""The progress display: silent unless stderr is a terminal or it is asked for."""

import jax.numpy as jnp
import numpy as np
import pytest

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core import progress

W = np.ones((64, 64), np.float32)


def f(x):
    return jnp.tanh(x @ W) @ W


@pytest.fixture
def immediate(monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "INTERVAL", {True: 0.0, False: 0.0})


def test_silent_when_stderr_is_not_a_terminal(immediate, capsys, tmp_path):
    to_onnx(f, [("B", 64)], path=tmp_path / "f.onnx")
    assert capsys.readouterr().err == ""


def test_when_asked_reports_equations_passes_and_weights_written(immediate, capsys, tmp_path):
    to_onnx(f, [("B", 64)], path=tmp_path / "f.onnx", progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("jax2onnx_nn: lowering equations 0/")
    assert any(line.startswith("jax2onnx_nn: passes 2/3") for line in lines)
    assert any(line.startswith("jax2onnx_nn: writing weights 0 MB/0 MB") for line in lines)


def test_a_finished_export_ends_on_its_last_stage_done(immediate, capsys, tmp_path):
    to_onnx(f, [("B", 64)], progress=True)
    assert capsys.readouterr().err.splitlines()[-1].startswith("jax2onnx_nn: passes 3/3 (")
    big = np.ones((2048, 2048), np.float32)  # 16.8 MB of weights
    to_onnx(lambda x: x @ big, [("B", 2048)], path=tmp_path / "f.onnx", progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert sum(line.startswith("jax2onnx_nn: passes 3/3 (") for line in lines) == 1
    assert lines[-1].startswith("jax2onnx_nn: writing weights 17 MB/17 MB (")


def test_nothing_is_shown_before_the_delay(capsys):
    to_onnx(f, [("B", 64)], progress=True)  # well under 2 s
    assert capsys.readouterr().err == ""
