"""The interpreter (``core/lower.py``): which equations it lowers, and what a rule sees of the
results nothing reads (``jxi.live_equations``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.testing import assert_exports_match


@jax.custom_jvp
def _eigh_with_jvp(a):
    return jnp.linalg.eigh(a)


@_eigh_with_jvp.defjvp
def _eigh_jvp(primals, tangents):
    del tangents  # a stand-in: never differentiated here
    w, v = _eigh_with_jvp(*primals)
    return (w, v), (jnp.zeros_like(w), jnp.zeros_like(v))


EIGH_USES = {
    "eigvalsh": (jnp.linalg.eigvalsh, [False, True]),  # eigh inside two jits, vectors dropped
    "eigh values": (lambda a: jnp.linalg.eigh(a)[0], [False, True]),
    "eigh vectors": (lambda a: jnp.linalg.eigh(a)[1], [True, False]),
    "eigh": (jnp.linalg.eigh, [True, True]),
    "lax eigh values": (lambda a: lax.linalg.eigh(a)[1], [False, True]),
    "custom_jvp's values": (lambda a: _eigh_with_jvp(a)[0], [False, True]),
}


@pytest.mark.parametrize("name", EIGH_USES)
def test_a_rule_sees_which_of_its_results_are_read(name):
    """``ctx.used_outputs`` follows the results through the calls lowered inline (jit,
    custom_jvp): ``eigvalsh``'s eigh drops its vectors although the jit around it returns them."""
    fn, expected = EIGH_USES[name]
    seen = []

    def eigh(ctx, a, **params):
        del params  # a stand-in: only what it is told is tested
        seen.append(ctx.used_outputs)
        vectors = ctx.op.Identity(a) if ctx.used_outputs[0] else None
        return [vectors, ctx.op.ReduceMax(a, ctx.ints([-1]), keepdims=0)]

    to_onnx(fn, [((2, 3, 3), np.float32)], lowerings={"eigh": eigh})
    assert seen == [expected]


def test_an_equation_nothing_reads_is_not_lowered():
    """Dead equations take no rule (their nodes would only be removed again); what is read
    still matches JAX."""
    calls = []

    def sin(ctx, x, **params):
        del params  # accuracy: onnxruntime's Sin has none
        calls.append(ctx.aval_in.shape)
        return ctx.op.Sin(x)

    def fn(x):
        dead = jax.jit(lambda y: (jnp.sin(y), jnp.cos(y)))(x)[0]  # noqa: F841
        return jnp.sin(x[:2]) + jnp.cos(x[:2])

    assert_exports_match(fn, [((3,), np.float32)], lowerings={"sin": sin})
    assert calls == [(2,)]


def test_an_equation_with_effects_is_kept_whatever_reads_it():
    """``jax.debug.print`` returns nothing anyone reads: its effect keeps it."""

    def fn(x):
        jax.debug.print("{}", x)
        y = jnp.sin(x)  # noqa: F841
        return x * 2

    jaxpr = jax.make_jaxpr(fn)(np.ones(3, np.float32)).jaxpr
    printed = jaxpr.eqns[0]  # debug_callback, or debug_print on newer JAX
    assert printed.effects
    assert jxi.live_equations(jaxpr) == [printed, jaxpr.eqns[-1]]
    assert jxi.live_equations(jaxpr, [False]) == [printed]
