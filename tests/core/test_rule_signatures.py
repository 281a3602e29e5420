"""Rules name the params JAX binds: a rule's signature takes each one by name (a param it
ignores is named and deleted with the reason), so a param a JAX version adds is a failure here,
not silently dropped."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core import registry

X = jnp.ones((4, 6), jnp.float32)
START = jnp.int32(1)
ROWS = jnp.array([0, 2])

# a call binding each primitive whose rule names its params
CALLS: dict[str, Callable[[jax.Array], Any]] = {
    "reshape": lambda x: x.reshape(6, 4),
    "broadcast_in_dim": lambda x: jnp.broadcast_to(x, (2, 4, 6)),
    "transpose": lambda x: x.T,
    "squeeze": lambda x: jnp.squeeze(x[None]),
    "concatenate": lambda x: jnp.concatenate([x, x]),
    "tile": lambda x: jnp.tile(x, (2, 1)),
    "stack": lambda x: jnp.stack([x, x]),
    "unstack": lambda x: list(jnp.unstack(x)),
    "split": lambda x: jnp.split(x, 2),
    "pad": lambda x: jnp.pad(x, 1),
    "slice": lambda x: x[1:3, ::2],
    "rev": lambda x: x[::-1],
    "dynamic_slice": lambda x: lax.dynamic_slice(x, (START, START), (2, 2)),
    "dynamic_update_slice": lambda x: lax.dynamic_update_slice(x, x[:2, :2], (START, START)),
    "iota": lambda x: jnp.arange(6) + x,
    "dot_general": lambda x: x @ x.T,
    "conv_general_dilated": lambda x: lax.conv(
        x[None, None], x[None, None, :2, :2], (1, 1), "SAME"
    ),
    "gather": lambda x: x[ROWS],
    "scatter": lambda x: x.at[ROWS].set(1.0),
    "scatter-add": lambda x: x.at[ROWS].add(1.0),
    "cumsum": lambda x: jnp.cumsum(x, 0),
    "sort": jnp.sort,
    "top_k": lambda x: lax.top_k(x, 2),
    "cond": lambda x: lax.cond(x[0, 0] > 0, lambda: x, lambda: -x),
    "cond of platforms": lambda x: lax.platform_dependent(x, cpu=jnp.sin, default=jnp.cos),
    "while": lambda x: lax.while_loop(lambda c: c[0, 0] < 5, lambda c: c + 1, x),
    # table rules: each names the union of its primitives' params
    "exp": jnp.exp,
    "abs": jnp.abs,
    "mul": lambda x: x * x,
    "add": lambda x: x + x,
    "tan": jnp.tan,
    "and": lambda x: x.astype(jnp.int32) & 3,
    "reduce_sum": lambda x: jnp.sum(x, 0),
    "reduce_prod": lambda x: jnp.prod(x, 0),
    "reduce_max": lambda x: jnp.max(x, 0),
    "reduce_or": lambda x: jnp.any(x > 0, 0),
    "argmax": lambda x: jnp.argmax(x, 0),
    "cumprod": lambda x: lax.cumprod(x, 0),
    "reduce": lambda x: lax.reduce(
        (x, x), (np.float32(0), np.float32(1)), lambda a, b: (a[0] + b[0], a[1] * b[1]), (0,)
    ),
    "platform_index": lambda x: lax.platform_dependent(x, cpu=jnp.sin, default=jnp.cos),
    "random_wrap": lambda x: jax.random.wrap_key_data(x[0, :2].astype(jnp.uint32)),
    "random_unwrap": lambda x: jax.random.key_data(jax.random.key(0)) + x[0, :2].astype(jnp.uint32),
}


def _params(call: str) -> dict[str, Any]:
    """The params of the first equation of ``call``'s primitive in its jaxpr (inner jaxprs
    included)."""
    name = call.split()[0]
    pending = [jax.make_jaxpr(CALLS[call])(X).jaxpr]
    while pending:
        for eqn in pending.pop(0).eqns:
            if eqn.primitive.name == name:
                return dict(eqn.params)
            pending += [getattr(p, "jaxpr", p) for p in eqn.params.values() if hasattr(p, "eqns")]
            pending += [p.jaxpr for p in eqn.params.values() if hasattr(p, "jaxpr")]
    raise AssertionError(f"{name} is not in its call's jaxpr")


@pytest.mark.parametrize("call", sorted(CALLS))
def test_rule_names_every_param_jax_binds(call: str) -> None:
    name = call.split()[0]
    registration = registry.builtin(name)
    assert registration is not None, name
    rule = registration.rule
    signature = inspect.signature(getattr(rule, "func", rule))
    kinds = {p.kind for p in signature.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name}'s rule hides its params in **"
    unnamed = sorted(set(_params(call)) - set(signature.parameters))
    assert not unnamed, f"JAX {jax.__version__} binds {name} with {unnamed}: name them in its rule"


@pytest.mark.parametrize("precision", [None, lax.Precision.DEFAULT, lax.Precision.HIGHEST])
def test_dot_general_computes_at_the_highest_precision(precision: Any) -> None:
    # the rule names precision and leaves it out: ONNX multiplies float32 in float32, which is
    # JAX's HIGHEST (and what its CPU computes at every setting)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 5, 7), np.float32), rng.standard_normal((2, 7, 3), np.float32)

    def fn(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.matmul(a, b, precision=precision)

    model = to_onnx(fn, [a.shape, b.shape])
    report = verify(fn, model, [a.shape, b.shape], input_values=[a, b])
    assert report.ok, str(report)
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = np.asarray(jax.jit(lambda a, b: jnp.matmul(a, b, precision="highest"))(a, b))
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
