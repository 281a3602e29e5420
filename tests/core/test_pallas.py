"""Pallas kernels export as what JAX's interpret mode computes with them (compared with JAX
running them in interpret mode on the CPU); hardware-only kernels are refused by name."""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.testing import assert_exports_match


def _elementwise_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.sin(x_ref[...]) + y_ref[...] * 2


def elementwise(x, y):
    block = pl.BlockSpec((4, 8), lambda i: (i, 0))
    return pl.pallas_call(
        _elementwise_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 4,),
        in_specs=[block, block],
        out_specs=block,
        interpret=True,
    )(x, y)


def _matmul_kernel(x_ref, w_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros(acc_ref.shape, acc_ref.dtype)

    acc_ref[...] += x_ref[...] @ w_ref[...]

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def blocked_matmul(x, w, bm=8, bn=8, bk=4):
    m, k = x.shape
    n = w.shape[1]
    return pl.pallas_call(
        _matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[_vmem((bm, bn))],
        interpret=True,
    )(x, w)


def _vmem(shape):
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.VMEM(shape, jnp.float32)


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def row_softmax(x):
    block = pl.BlockSpec((2, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(
        _softmax_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 2,),
        in_specs=[block],
        out_specs=block,
        interpret=True,
    )(x)


def test_elementwise_kernel_over_a_grid():
    assert_exports_match(elementwise, [(8, 8), (8, 8)])


def test_blocked_matmul_accumulates_over_the_last_grid_axis():
    assert_exports_match(blocked_matmul, [(16, 12), (12, 16)])


def test_softmax_kernel_inside_jit_and_vmap():
    assert_exports_match(jax.jit(jax.vmap(row_softmax)), [(3, 4, 5)])


def test_kernel_without_a_grid_and_with_program_id_arithmetic():
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[...] = x_ref[...] * (i + 1).astype(jnp.float32)

    def f(x):
        block = pl.BlockSpec((2, 3), lambda i: (i, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(3,),
            in_specs=[block],
            out_specs=block,
            interpret=True,
        )(x)

    assert_exports_match(f, [(6, 3)])
    whole = pl.pallas_call(
        _softmax_kernel, out_shape=jax.ShapeDtypeStruct((4, 6), jnp.float32), interpret=True
    )
    assert_exports_match(whole, [(4, 6)])


def test_hardware_kernel_is_refused_with_its_name_and_the_way_out():
    pltpu = pytest.importorskip("jax.experimental.pallas.tpu")

    def copy_kernel(x_hbm, o_ref, sem):
        copy = pltpu.make_async_copy(x_hbm, o_ref, sem)
        copy.start()
        copy.wait()

    def f(x):
        return pl.pallas_call(
            copy_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            scratch_shapes=[pltpu.SemaphoreType.DMA],
        )(x)

    with pytest.raises(ConversionError) as err:
        to_onnx(f, [(8, 128)])
    text = str(err.value)
    assert "copy_kernel" in text and "dma_start" in text and "test_pallas.py" in text
    assert "pure-JAX fallback" in text and "jax2onnx_nn.lowering('pallas_call')" in text


def _shipped(module, name):
    ops = pytest.importorskip(f"jax.experimental.pallas.ops.{module}")
    fn = getattr(ops, name)
    if "interpret" not in inspect.signature(fn).parameters:
        pytest.skip(f"this JAX's pallas.ops.{module}.{name} has no interpret switch")
    return fn


# kernels JAX ships that run in interpret mode: (module, function, input shapes, kwargs)
SHIPPED = {
    "softmax": ("gpu.softmax", "softmax", [(4, 32)], {}),
    "layer_norm": ("gpu.layer_norm", "layer_norm", [(2, 4, 32), (32,), (32,)], {}),
    "rms_norm": ("gpu.rms_norm", "rms_norm", [(2, 4, 32), (32,), (32,)], {}),
    "attention": (
        "gpu.attention",
        "mha",
        [(1, 32, 2, 16)] * 3,
        {"segment_ids": None, "causal": True, "block_sizes": None},
    ),
}


@pytest.mark.parametrize("kernel", list(SHIPPED))
def test_kernels_jax_ships_in_interpret_mode(kernel):
    module, name, shapes, kwargs = SHIPPED[kernel]
    fn = _shipped(module, name)
    if kwargs.get("block_sizes", 0) is None:
        kwargs = {
            **kwargs,
            "block_sizes": type(inspect.signature(fn).parameters["block_sizes"].default)(
                block_q=16,
                block_k=16,
                block_q_dkv=16,
                block_kv_dkv=16,
                block_q_dq=16,
                block_kv_dq=16,
            ),
        }
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    assert_exports_match(
        functools.partial(fn, interpret=True, **kwargs), shapes, input_values=values
    )
