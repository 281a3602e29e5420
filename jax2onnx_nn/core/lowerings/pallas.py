"""``pallas_call``: a Pallas kernel exports as what JAX's interpret mode computes with it.

The interpret path gives every kernel a meaning in plain JAX: the kernel's state (its refs)
is discharged into values (loads and stores become slices and dynamic updates), and the
discharged body runs once per grid point in a while loop that carries the outputs, so
``pl.program_id``, ``pl.when`` and an accumulator over a grid axis mean what they mean on the
device. That function is traced into a jaxpr and lowered like any other (the kernel's blocks
become Slice / ScatterND-style updates inside a Loop). Kernels that drive the hardware
(DMAs, semaphores, barriers, the TPU's PRNG) have no such meaning: they are refused with the
kernel's name and what to do instead.
"""

from __future__ import annotations

from typing import Any

import jax
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.registry import builtin_rules, register


def _pallas_call(ctx: LoweringContext, *args: ir.Value, **params: Any) -> list[ir.Value]:
    hardware = jxi.pallas_hardware_primitives(params)
    if hardware:
        raise ConversionError(
            f"the Pallas kernel {jxi.pallas_kernel_name(params)}, called at "
            f"{ctx.source_line or '<unknown location>'}, "
            f"uses {', '.join(hardware)}: hardware-only operations (DMAs, semaphores, barriers) "
            "with no "
            "meaning in ONNX; nothing was exported. Export the library's pure-JAX fallback of the "
            "kernel instead (most kernels have a reference implementation), or register a lowering "
            "for the kernel's call (jax2onnx_nn.lowering('pallas_call') or "
            "lowerings={'pallas_call': ...}) "
            "that computes it from JAX operations"
        )
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_in]
    closed = jax.make_jaxpr(jxi.pallas_interpreter(params))(*specs)
    return ctx.lower_sub(closed, args)


with builtin_rules():
    register("pallas_call", _pallas_call, onnx_ops=())
