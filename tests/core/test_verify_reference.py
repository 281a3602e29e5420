"""Where verify computes JAX's reference: on the CPU by default (an accelerator's default
matmul precision would make a right export look wrong), on the default device if asked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core import verify as verify_module
from jax2onnx_nn.testing import assert_exports_match


def _weight_on_last_device() -> jax.Array:
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    return jax.device_put(w, jax.devices()[-1])


def test_reference_runs_on_cpu_here_and_the_report_says_so():
    w = _weight_on_last_device()
    fn = lambda x: jnp.tanh(x @ w)  # noqa: E731
    report = verify(fn, to_onnx(fn, [(2, 3)]), [(2, 3)])
    assert report.ok and report.reference == "cpu"
    assert str(report).endswith("JAX reference: cpu")


def test_reference_on_an_accelerator_host_moves_the_arrays_to_the_cpu(monkeypatch):
    """Where the default device is not the CPU, the function is traced and its arrays (here a
    weight on another device) are copied to the CPU, where the jaxpr runs."""
    monkeypatch.setattr(verify_module, "_default_platform", lambda: "tpu")
    w = _weight_on_last_device()
    fn = lambda x: jnp.tanh(x @ w)  # noqa: E731
    x = np.ones((2, 3), np.float32)
    with jax.default_device(jax.devices()[-1]):
        out, where = verify_module.reference_outputs(fn, (x,), {})
        jitted, _ = verify_module.reference_outputs(fn, (x,), {}, jit=True)
    cpu = jax.devices("cpu")[0]
    assert out.devices() == {cpu} and jitted.devices() == {cpu}
    assert where.startswith("cpu (the function's arrays copied from tpu")
    np.testing.assert_allclose(np.asarray(out), np.tanh(x @ np.asarray(w)), rtol=1e-6)
    report = verify(fn, to_onnx(fn, [(2, 3)]), [(2, 3)])
    assert report.ok and "JAX reference: cpu (the function's arrays copied from tpu" in str(report)


def test_reference_device_default_runs_on_the_default_device(monkeypatch):
    monkeypatch.setattr(verify_module, "_default_platform", lambda: "tpu")
    w = _weight_on_last_device()
    fn = lambda x: x @ w  # noqa: E731
    with jax.default_device(jax.devices()[-1]):
        out, where = verify_module.reference_outputs(fn, (jnp.ones((2, 3)),), {}, device="default")
    assert out.devices() == {jax.devices()[-1]}
    assert where == "tpu (the default device, as asked)"
    report = verify(fn, to_onnx(fn, [(2, 3)]), [(2, 3)], reference_device="default")
    assert "JAX reference: tpu (the default device, as asked)" in str(report)
    with pytest.raises(ValueError, match="reference_device must be one of"):
        verify(fn, to_onnx(fn, [(2, 3)]), [(2, 3)], reference_device="tpu")


def test_reference_that_needs_concrete_values_runs_at_highest_matmul_precision(monkeypatch):
    monkeypatch.setattr(verify_module, "_default_platform", lambda: "tpu")
    seen = []

    def fn(x):
        seen.append(jax.config.jax_default_matmul_precision)
        return x * 2 if float(x.sum()) > -1e9 else x  # a Python branch on a value: not traced

    out, where = verify_module.reference_outputs(fn, (jnp.ones(3),), {})
    assert seen[-1] == "highest" and "matmul precision 'highest'" in where
    np.testing.assert_array_equal(np.asarray(out), 2 * np.ones(3))


def test_assert_exports_match_takes_the_reference_device(monkeypatch):
    monkeypatch.setattr(verify_module, "_default_platform", lambda: "tpu")
    calls = []
    original = verify_module.reference_outputs

    def spy(*args, **kwargs):
        calls.append(kwargs["device"])
        return original(*args, **kwargs)

    monkeypatch.setattr(verify_module, "reference_outputs", spy)
    assert_exports_match(jnp.sin, [(3,)])
    assert_exports_match(jnp.sin, [(3,)], reference_device="default")
    assert calls == ["cpu", "default"]


@pytest.mark.parametrize(
    ("flag", "where"),
    [((), "cpu"), (("--reference-device", "default"), "cpu (the default device, as asked)")],
)
def test_cli_verify_names_where_the_reference_ran(tmp_path, monkeypatch, capsys, flag, where):
    from jax2onnx_nn.__main__ import main

    (tmp_path / "tiny.py").write_text(
        "import jax.numpy as jnp\n\ndef f(x):\n    return jnp.tanh(x) * 2\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["export", "tiny:f", "--input", "2,3", "-o", "t.onnx", "--verify", *flag]) == 0
    assert f"JAX reference: {where}\n" in capsys.readouterr().out
