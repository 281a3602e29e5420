"""The registry's layers: ``lowerings=`` > user registrations > plugins > built-ins, whatever
the order in which they were registered."""

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
import pytest

from jax2onnx_nn import lowering, register, to_onnx
from jax2onnx_nn.core import registry
from jax2onnx_nn.testing import assert_exports_match


def _tanh_by_sigmoid(ctx, x, **params):
    """tanh(x) = 2 sigmoid(2x) - 1: numerically tanh, recognisable by its Sigmoid node."""
    del params  # accuracy: the rule is exact enough for the comparison
    two = ctx.const(2.0, like=x)
    return ctx.op.Sub(ctx.op.Mul(two, ctx.op.Sigmoid(ctx.op.Mul(two, x))), ctx.const(1.0, like=x))


def _tanh_by_exp(ctx, x, **params):
    """tanh(x) = 1 - 2 / (exp(2x) + 1), recognisable by its Exp node."""
    del params
    two, one = ctx.const(2.0, like=x), ctx.const(1.0, like=x)
    return ctx.op.Sub(one, ctx.op.Div(two, ctx.op.Add(ctx.op.Exp(ctx.op.Mul(two, x)), one)))


def _ops(model) -> set[str]:
    return {node.op_type for node in model.graph.node}


@pytest.fixture
def tables() -> Iterator[None]:
    """Registrations made by a test are undone after it (the plugin flag too)."""
    saved = {layer: dict(table) for layer, table in registry._TABLES.items()}
    loaded = registry._PLUGINS_LOADED
    yield
    for layer, table in registry._TABLES.items():
        table.clear()
        table.update(saved[layer])
    registry._PLUGINS_LOADED = loaded


class _EntryPoint:
    def __init__(self, fn) -> None:
        self.fn = fn

    def load(self):
        return self.fn


def _install_plugin(monkeypatch: pytest.MonkeyPatch, rule) -> None:
    """A fake entry-point plugin registering ``rule`` for tanh, loaded on the next lookup."""

    def plugin() -> None:
        register("tanh", rule, onnx_ops=("Sigmoid",))

    monkeypatch.setattr(
        registry.importlib.metadata,
        "entry_points",
        lambda group: [_EntryPoint(plugin)] if group == "jax2onnx_nn.lowerings" else [],
    )
    registry._PLUGINS_LOADED = False


def test_builtins_are_registered_on_import_as_builtins():
    assert registry.layer_of("tanh") == registry.BUILTIN
    assert "Tanh" in _ops(to_onnx(jnp.tanh, [(3,)]))


def test_user_rule_registered_before_the_first_export_is_called():
    """The bug: built-ins loaded lazily on the first lookup used to overwrite this rule."""
    script = textwrap.dedent(
        """
        import jax.numpy as jnp
        import jax2onnx_nn

        calls = []

        @jax2onnx_nn.lowering("tanh", onnx_ops=("Sigmoid",))
        def my_tanh(ctx, x, **params):
            calls.append(1)
            two = ctx.const(2.0, like=x)
            sigmoid = ctx.op.Sigmoid(ctx.op.Mul(two, x))
            return ctx.op.Sub(ctx.op.Mul(two, sigmoid), ctx.const(1.0, like=x))

        model = jax2onnx_nn.to_onnx(jnp.tanh, [(3,)])
        print(len(calls), sorted({n.op_type for n in model.graph.node}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    calls, _, ops = out.stdout.strip().partition(" ")
    assert calls == "1"
    assert "Sigmoid" in ops and "Tanh" not in ops


def test_user_rule_beats_builtin_before_and_after_exports(tables):
    assert "Tanh" in _ops(to_onnx(jnp.tanh, [(3,)]))
    lowering("tanh")(_tanh_by_sigmoid)
    model = assert_exports_match(jnp.tanh, [((2, 3), np.float32)])
    assert "Sigmoid" in _ops(model) and "Tanh" not in _ops(model)
    register("tanh", _tanh_by_exp)  # within the user layer, the later registration wins
    assert "Exp" in _ops(to_onnx(jnp.tanh, [(3,)]))


def test_plugin_beats_builtin(tables, monkeypatch):
    _install_plugin(monkeypatch, _tanh_by_sigmoid)
    model = assert_exports_match(jnp.tanh, [((4,), np.float32)])
    assert "Sigmoid" in _ops(model) and "Tanh" not in _ops(model)
    assert registry.layer_of("tanh") == registry.PLUGIN
    assert registry.registered()["tanh"].onnx_ops == ("Sigmoid",)


def test_user_rule_beats_plugin_whichever_comes_first(tables, monkeypatch):
    register("tanh", _tanh_by_exp)  # before the plugin is loaded
    _install_plugin(monkeypatch, _tanh_by_sigmoid)
    model = assert_exports_match(jnp.tanh, [((4,), np.float32)])
    assert "Exp" in _ops(model) and "Sigmoid" not in _ops(model)
    assert registry.layer_of("tanh") == registry.USER


def test_per_export_lowerings_beat_user_rules(tables):
    register("tanh", _tanh_by_exp)
    model = assert_exports_match(
        jnp.tanh, [((4,), np.float32)], lowerings={"tanh": _tanh_by_sigmoid}
    )
    assert "Sigmoid" in _ops(model) and "Exp" not in _ops(model)
    assert "Exp" in _ops(to_onnx(jnp.tanh, [(3,)]))  # the override was for that export only


@pytest.mark.parametrize("wrong", ["dtype", "count"])
def test_a_rule_that_disagrees_with_jax_is_a_clear_error(wrong):
    """A lowering whose result has another dtype than JAX's, or another number of results, is
    a ConversionError naming the primitive, the user's line and what to do, not an assertion."""
    from jax2onnx_nn import ConversionError

    def bad_tanh(ctx, x, **params):
        if wrong == "dtype":
            return ctx.op.Cast(x, to=ir.DataType.DOUBLE)
        return [ctx.op.Tanh(x), ctx.op.Tanh(x)]

    with pytest.raises(ConversionError) as raised:
        to_onnx(lambda x: jnp.tanh(x), [((3,), np.float32)], lowerings={"tanh": bad_tanh})
    message = str(raised.value)
    assert (
        "internal error: the lowering of tanh at " in message and "test_registry.py" in message
    ), message
    assert (
        "returned DOUBLE where JAX has float32"
        if wrong == "dtype"
        else "returned 2 values for 1 outputs"
    ) in message, message
    assert "please report it" in message


def test_a_rule_for_complex_numbers_is_given_the_pairs(tables):
    """What the error for an op on complex numbers advises: a rule registered with
    complex_pairs=True is given the (real, imag) pairs; one registered without it is not asked."""
    from jax2onnx_nn import ConversionError
    from jax2onnx_nn.core.verify import run_onnx

    z = np.array([1 + 2j, -3 - 0.5j], np.complex64)
    register("rsqrt", lambda ctx, x, **params: ctx.op.Neg(x))
    with pytest.raises(ConversionError, match="rsqrt on complex numbers"):
        to_onnx(jax.lax.rsqrt, [z])
    register(
        "rsqrt", lambda ctx, x, **params: ctx.op.Neg(x), complex_pairs=True
    )  # (not rsqrt: a marker)
    (out,) = run_onnx(to_onnx(jax.lax.rsqrt, [z]), [z])
    np.testing.assert_array_equal(out, -np.stack([z.real, z.imag], -1))
