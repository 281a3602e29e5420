"""shard_map programs export as the global computation they describe (1, 2 and 4 CPU devices:
tests/conftest.py gives JAX four), compared with JAX running them on the devices."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.testing import assert_exports_match, op_types

pytestmark = pytest.mark.skipif(
    len(jax.devices()) < 4, reason="needs 4 devices (tests/conftest.py sets XLA_FLAGS)"
)
shard_map = (
    getattr(jax, "shard_map", None)
    or __import__("jax.experimental.shard_map", fromlist=["shard_map"]).shard_map
)


def mesh(shape, names):
    n = int(np.prod(shape))
    return jax.sharding.Mesh(np.array(jax.devices()[:n]).reshape(shape), names)


MESH_X = mesh((4,), ("x",))
MESH_XY = mesh((2, 2), ("x", "y"))
rng = np.random.default_rng(0)


def values(*shapes):
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _collectives(a):
    return [
        lax.psum(a, "x"),
        lax.pmean(a, ("x", "y")),
        lax.pmax(a, "y"),
        lax.pmin(a, "x"),
        lax.all_gather(a, "x", axis=1, tiled=False),
        lax.all_gather(a, ("x", "y"), tiled=True),
        lax.all_gather(a, ("y", "x"), axis=1, tiled=True),
        lax.psum_scatter(a, "y", scatter_dimension=0, tiled=True),
        lax.psum_scatter(a, ("x", "y"), scatter_dimension=0, tiled=True),
        lax.psum_scatter(a[:, :2], "x", scatter_dimension=1, tiled=False),
        lax.all_to_all(a, "x", 0, 1, tiled=True),
        lax.all_to_all(a, ("y", "x"), 0, 1, tiled=True),
        lax.all_to_all(a[:2], "y", 0, 1, tiled=False),
        lax.ppermute(a, "y", [(0, 1), (1, 0)]),
        lax.ppermute(a, ("x", "y"), [(0, 3), (3, 1), (1, 0)]),
        lax.axis_index("y") + a,
        lax.axis_index(("x", "y")) * a,
        lax.axis_size("x") * a,
        lax.psum(1, ("x", "y")) * a,
    ]


@pytest.mark.parametrize("check_vma", [True, False])
def test_every_collective_over_two_mesh_axes(check_vma):
    f = shard_map(
        _collectives,
        mesh=MESH_XY,
        in_specs=P("x", "y"),
        out_specs=P(("x", "y")),
        check_vma=check_vma,
    )
    assert_exports_match(f, [(8, 4)])


def test_one_device_mesh_is_the_body_itself():
    f = shard_map(
        lambda a, w: jnp.tanh(lax.psum(a @ w, "x")),
        mesh=mesh((1,), ("x",)),
        in_specs=(P("x"), P()),
        out_specs=P("x"),
    )
    model = assert_exports_match(f, [(5, 3), (3, 2)])
    assert op_types(model) == ["MatMul", "Tanh"]


def test_data_parallel_mlp_with_replicated_weights_and_a_mean_loss():
    w1, w2 = values((6, 16), (16, 3))

    def step(x, y):
        def local(x, y):
            h = jax.nn.relu(x @ w1)
            return lax.pmean(jnp.mean((h @ w2 - y) ** 2), "x"), h @ w2

        return shard_map(local, mesh=MESH_X, in_specs=(P("x"), P("x")), out_specs=(P(), P("x")))(
            x, y
        )

    model = assert_exports_match(step, [(8, 6), (8, 3)])
    # the replicated weights are multiplied once per matrix product, not once per device
    assert sum(int(np.prod(i.dims)) for i in model.graph.initializer) < 6 * 16 + 16 * 3 + 64


def test_tensor_parallel_column_then_row_sharded_matmuls():
    w1, w2 = values((8, 16), (16, 8))

    def mlp(x, w1, w2):
        def local(x, w1, w2):  # w1 sharded by columns, w2 by rows: one psum at the end
            return lax.psum(jax.nn.gelu(x @ w1) @ w2, "x")

        return shard_map(
            local, mesh=MESH_X, in_specs=(P(), P(None, "x"), P("x", None)), out_specs=P()
        )(x, w1, w2)

    assert_exports_match(mlp, [(4, 8), (8, 16), (16, 8)])

    def gathered(x, w1):  # columns gathered back with all_gather
        local = lambda x, w: lax.all_gather(x @ w, "x", axis=1, tiled=True)  # noqa: E731
        return shard_map(
            local, mesh=MESH_X, in_specs=(P(), P(None, "x")), out_specs=P(), check_vma=False
        )(x, w1)

    assert_exports_match(gathered, [(4, 8), (8, 16)])


def test_ring_of_ppermutes_sums_the_blocks():
    n = 4

    def ring(x):
        def local(x):
            def step(carry, _):
                acc, block = carry
                block = lax.ppermute(block, "x", [(i, (i + 1) % n) for i in range(n)])
                return (acc + block, block), None

            (acc, _), _ = lax.scan(step, (x, x), None, length=n - 1)
            return acc

        return shard_map(local, mesh=MESH_X, in_specs=P("x"), out_specs=P("x"))(x)

    assert_exports_match(ring, [(8, 3)])


def test_moe_all_to_all_dispatch_and_return():
    experts = values((4, 5, 5))[0]

    def moe(tokens):  # [devices * 4 tokens, 5]: each device sends one token-slot per expert
        def local(tokens, w):
            routed = lax.all_to_all(
                tokens, "x", 0, 0, tiled=True
            )  # each device gets its expert's tokens
            out = jnp.tanh(routed @ w[0])
            return lax.all_to_all(out, "x", 0, 0, tiled=True)

        return shard_map(local, mesh=MESH_X, in_specs=(P("x"), P("x")), out_specs=P("x"))(
            tokens, experts
        )

    assert_exports_match(moe, [(16, 5)])


def test_collectives_inside_cond_and_while_and_jit_in_the_body():
    def local(x):
        i = lax.axis_index("x")
        # a branch with collectives is taken on every device alike (else JAX itself hangs)
        y = lax.cond(lax.psum(x.sum(), "x") > 0, lambda v: lax.psum(v, "x"), lambda v: v * 2, x)
        y = lax.cond(i % 2 == 0, lambda v: v + 1, lambda v: v * 2, y)
        z = jax.jit(lambda v: lax.pmax(v, "x") - v)(y)
        # collectives in a loop run the same number of steps on every device (else JAX hangs)
        n = lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 0.5 + lax.psum(c[1], "x") * 0.1), (0, z)
        )[1]
        return lax.while_loop(lambda c: c[0] < 2 + i, lambda c: (c[0] + 1, c[1] + 1), (0, n))[1]

    f = shard_map(local, mesh=MESH_X, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    assert_exports_match(f, [(8, 2)])


def test_shard_map_inside_jit_scan_and_vmap():
    inner = shard_map(
        lambda a: lax.psum(jnp.sin(a), "x"), mesh=MESH_X, in_specs=P("x"), out_specs=P()
    )

    def program(xs):
        ys = jax.jit(jax.vmap(inner))(xs)  # [3, 8, 2] -> [3, 2, 2]
        return lax.scan(lambda c, x: (c + inner(x), None), jnp.zeros((2, 2)), xs)[0] + ys.sum(0)

    assert_exports_match(program, [(3, 8, 2)])


def test_partly_replicated_inputs_and_outputs_over_two_axes():
    def body(a, b):
        return a * lax.axis_index("y") + b, lax.psum(b, "x")

    f = shard_map(
        body,
        mesh=MESH_XY,
        in_specs=(P("x", None), P(None, "y")),
        out_specs=(P("x", "y"), P(None, "y")),
        check_vma=False,
    )
    assert_exports_match(f, [(4, 6), (2, 12)])
    g = shard_map(lambda a: a * 2, mesh=MESH_XY, in_specs=P(("x", "y")), out_specs=P(("y", "x")))
    assert_exports_match(g, [(8, 3)])


def test_sharding_annotations_are_no_ops():
    sharding = NamedSharding(MESH_X, P("x"))

    @functools.partial(jax.jit, in_shardings=(sharding,), out_shardings=NamedSharding(MESH_X, P()))
    def f(x):
        y = lax.with_sharding_constraint(jnp.sin(x), NamedSharding(MESH_X, P(None, "x")))
        y = jax.device_put(y * 2, jax.devices()[1])
        return jnp.cos(y)

    model = assert_exports_match(f, [(8, 4)])
    assert op_types(model) == ["Sin", "Mul", "Cos"]


def test_weights_sharded_over_devices_export_as_one_array():
    w = jax.device_put(values((8, 4))[0], NamedSharding(MESH_X, P("x")))
    model = assert_exports_match(lambda x: x @ w, [(3, 8)])
    (init,) = model.graph.initializer
    assert list(init.dims) == [8, 4]


def test_unsupported_collective_context_is_a_conversion_error():
    def local(x):
        total = lambda v: v * lax.psum(x, "x")  # noqa: E731
        return lax.custom_linear_solve(total, x, solve=lambda matvec, b: b / lax.psum(x, "x"))

    f = shard_map(local, mesh=MESH_X, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    with pytest.raises(
        ConversionError,
        match=r"collectives inside a custom_linear_solve \(at .*test_sharding.py:\d+",
    ):
        to_onnx(f, [(8,)])


def test_branch_with_collectives_chosen_per_row_of_a_two_axis_mesh():
    def local(x):
        taken = lax.psum(x.sum(), "x") > 0  # the same along x, different along y
        return lax.cond(taken, lambda v: lax.psum(v, "x"), lambda v: v * 2, x)

    f = shard_map(local, mesh=MESH_XY, in_specs=P("x", "y"), out_specs=P("x", "y"), check_vma=False)
    assert_exports_match(f, [(4, 4)], input_values=[np.array([[1, 2, -3, -4]] * 4, np.float32)])


def test_collective_over_axis_index_groups_is_a_conversion_error():
    # JAX sums within each group ([1, 1, 5, 5] for arange(4)); the export would sum over all
    def local(x):
        return lax.psum(x, "x", axis_index_groups=[[0, 1], [2, 3]])

    f = shard_map(local, mesh=MESH_X, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    with pytest.raises(
        ConversionError, match=r"psum: axis_index_groups=.* \(at .*test_sharding.py:\d+"
    ):
        to_onnx(f, [(4,)])
