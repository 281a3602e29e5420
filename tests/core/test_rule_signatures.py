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
from jax.ad_checkpoint import checkpoint_name

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core import complex as complex_pairs
from jax2onnx_nn.core import registry
from jax2onnx_nn.core.coarse import CoarseCall, bind_coarse
from jax2onnx_nn.core.functions import call_function
from jax2onnx_nn.core.jax_nn.activations import ACTIVATIONS
from jax2onnx_nn.core.lowerings.sharding import COLLECTIVES

X = jnp.ones((4, 6), jnp.float32)
START = jnp.int32(1)
ROWS = jnp.array([0, 2])
_REPLICATED = jax.sharding.NamedSharding(
    jax.sharding.Mesh(np.array(jax.devices()[:1]), ("a",)), jax.sharding.PartitionSpec()
)


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
    # _passthrough: the union of its primitives' params
    "stop_gradient": lax.stop_gradient,
    "optimization_barrier": lax.optimization_barrier,
    "copy": jnp.copy,
    "device_put": lambda x: jax.device_put(x, jax.devices()[0]),
    "name": lambda x: checkpoint_name(x, "n"),
    "sharding_constraint": lambda x: jax.lax.with_sharding_constraint(x, _REPLICATED),
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


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_rule_names_its_config(name: str) -> None:
    # the coarse op's params are the activation's config but where (a masked call is the body)
    activation = ACTIVATIONS[name]
    signature = inspect.signature(activation.rule)
    kinds = {p.kind for p in signature.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name}'s rule hides its params in **"
    assert list(signature.parameters)[2:] == sorted(set(activation.config) - {"where"}), name


def _collective_calls(x: jax.Array) -> list[jax.Array]:
    return [
        lax.psum(x, "a"),
        lax.pmax(x, "a"),
        lax.pmin(x, ("a", "b")),
        lax.all_gather(x, "a", axis=1, tiled=True)[:, :3],
        lax.psum_scatter(x, "b", scatter_dimension=0, tiled=True).repeat(2, 0),
        lax.all_to_all(x, "a", 0, 1, tiled=True),
        lax.ppermute(x, "b", [(0, 1), (1, 0)]),
        lax.axis_index("a") + x,
    ]


@pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices (tests/conftest.py)")
@pytest.mark.parametrize("check_vma", [True, False])
def test_collectives_name_every_param_jax_binds(check_vma: bool) -> None:
    # shard_map's body runs on device-stacked values: each collective's function names its params
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "b"))
    spec = jax.sharding.PartitionSpec("a", "b")
    f = jax.shard_map(
        _collective_calls, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=check_vma
    )
    (shard,) = [e for e in jax.make_jaxpr(f)(X).jaxpr.eqns if e.primitive.name == "shard_map"]
    seen = set()
    for eqn in shard.params["jaxpr"].eqns:
        if eqn.primitive.name not in COLLECTIVES:
            continue
        seen.add(eqn.primitive.name)
        signature = inspect.signature(COLLECTIVES[eqn.primitive.name])
        kinds = {p.kind for p in signature.parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, eqn.primitive.name
        unnamed = sorted(set(eqn.params) - set(signature.parameters))
        assert not unnamed, f"JAX {jax.__version__} binds {eqn.primitive.name} with {unnamed}"
    assert {"pmax", "pmin", "all_gather", "all_to_all", "ppermute", "axis_index"} <= seen, seen
    assert seen & {"psum", "psum_invariant", "psum2"} and seen & {"reduce_scatter"}, seen


def _function_call(x: jax.Array) -> Any:
    return call_function(jnp.sin, (x,), {}, name="sin", key="sin")


def _coarse_call(x: jax.Array) -> Any:
    return bind_coarse(CoarseCall("jax_nn_relu", inputs={"x": x}), jax.nn.relu, (x,), {})


@pytest.mark.parametrize("call", [_function_call, _coarse_call])
@pytest.mark.parametrize("vmapped", [False, True])
def test_body_primitive_rules_name_every_param(call: Callable[..., Any], vmapped: bool) -> None:
    # an ONNX function call and a coarse op: their binders' params, and vmap_levels under vmap
    (eqn,) = jax.make_jaxpr(jax.vmap(call) if vmapped else call)(X).jaxpr.eqns
    registration = registry.builtin(eqn.primitive.name)
    assert registration is not None, eqn.primitive.name
    signature = inspect.signature(registration.rule)
    kinds = {p.kind for p in signature.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, eqn.primitive.name
    assert ("vmap_levels" in eqn.params) == vmapped, eqn.params
    assert not set(eqn.params) - set(signature.parameters), eqn.params


def test_reshard_rule_names_every_param_jax_binds() -> None:
    # an Explicit mesh is set outside the trace (set_mesh refuses to run inside one)
    mesh = jax.make_mesh((1,), ("a",), axis_types=(jax.sharding.AxisType.Explicit,))
    set_mesh = getattr(jax, "set_mesh", None) or jax.sharding.use_mesh
    with set_mesh(mesh):
        jaxpr = jax.make_jaxpr(lambda x: jax.sharding.reshard(x, jax.sharding.PartitionSpec("a")))
        (eqn,) = jaxpr(X).jaxpr.eqns
    registration = registry.builtin(eqn.primitive.name)
    assert eqn.primitive.name == "reshard" and registration is not None
    unnamed = sorted(set(eqn.params) - set(inspect.signature(registration.rule).parameters))
    assert not unnamed, f"JAX {jax.__version__} binds reshard with {unnamed}: name them in its rule"


Z = jnp.ones((3, 4), jnp.complex64)
# a call binding each primitive that has a pair impl (lowerings/complex.py) on complex operands
# (dot_general's and conv_general_dilated's forward their params to the real primitive's bind)
PAIR_CALLS: dict[str, Callable[[jax.Array], Any]] = {
    "exp": jnp.exp,
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "sin": jnp.sin,
    "tan": jnp.tan,
    "asinh": jnp.arcsinh,
    "log2": jnp.log2,  # a primitive of its own on JAX 0.12 (log / log(2) on 0.10)
    "complex": lambda z: lax.complex(jnp.real(z), jnp.real(z)),
    "real": jnp.real,
    "imag": jnp.imag,
    "conj": jnp.conj,
    "abs": jnp.abs,
    "sign": jnp.sign,
    "mul": lambda z: z * z,
    "div": lambda z: z / z,
    "eq": lambda z: z == z,
    "ne": lambda z: z != z,
    "integer_pow": lambda z: z**3,
    "pow": lambda z: z**z,
    "convert_element_type": lambda z: lax.convert_element_type(jnp.real(z), jnp.complex64),
    "reduce_prod": lambda z: jnp.prod(z, 0),
    "square": lax.square,
    "max": lambda z: lax.max(z, z),
    "min": lambda z: lax.min(z, z),
    "reduce_max": lambda z: lax.reduce_max(z, (0,)),
    "reduce_min": lambda z: lax.reduce_min(z, (0,)),
    "sort": lambda z: lax.sort(z, dimension=0),
    "cumprod": lambda z: lax.cumprod(z, 0),
}


@pytest.mark.parametrize("name", sorted(PAIR_CALLS))
def test_pair_impl_names_every_param_jax_binds(name: str) -> None:
    # a pair impl gets the equation's params plus avals_in / avals_out (core/complex.py)
    from jax2onnx_nn.core.lowerings import complex as _  # noqa: F401  (registers the impls)

    eqns = [e for e in jax.make_jaxpr(PAIR_CALLS[name])(Z).jaxpr.eqns if e.primitive.name == name]
    if not eqns and name == "log2":
        pytest.skip(f"JAX {jax.__version__} has no log2 primitive")
    assert eqns, f"{name} is not in its call's jaxpr"
    impl = complex_pairs.impl_of(name)
    assert impl is not None, name
    signature = inspect.signature(impl)
    kinds = {p.kind for p in signature.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name}'s pair impl hides its params in **"
    bound = {*eqns[0].params, "avals_in", "avals_out"}
    unnamed = sorted(bound - set(signature.parameters))
    assert not unnamed, f"JAX {jax.__version__} binds {name} with {unnamed}: name them"
