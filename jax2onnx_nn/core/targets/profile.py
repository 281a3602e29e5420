"""A deployment target's profile: how to write a graph for one runtime (data)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeAlias

import onnx_ir as ir

from jax2onnx_nn.core.ir.edit import Editor, Replacement

# a target rewrite: a function of one node and an Editor, declared with ir.census.rewrite
Rewrite: TypeAlias = Callable[[ir.Node, Editor], Replacement]


@dataclass(frozen=True)
class Target:
    """How to write a graph for one runtime.

    Attributes:
        name: the runtime (``"onnxruntime"``, ``"openvino"``, ...).
        max_opset: the newest opset it loads (None: whatever the exporter supports).
        model_functions: it runs model-local ONNX functions; if not, calls are inlined.
        scan_symbolic: a ``lax.scan`` of symbolic length is an ONNX ``Scan`` (else a ``Loop``:
            onnxruntime's Scan fails on an empty sequence, and a symbolic length may be 0).
        scan_ticks: a loop of static length without scanned inputs (a ``fori_loop``, a
            ``while_loop`` of counted steps, a ``lax.scan`` without xs) is a ``Scan`` over its
            counter's values, or over ticks its body does not read (else a ``Loop``). On
            onnxruntime 1.32 Scan is faster than Loop (benchmarks/scan_vs_loop.py); tract has
            no Loop; OpenVINO ran a Scan over ticks too few times. A static-length scan with
            scanned inputs is always a ``Scan``, a data-dependent ``while_loop`` a ``Loop`` (a
            ``Scan`` of ``loop_bound`` steps with that option).
        bounded_if: a data-dependent ``while_loop`` bounded by ``loop_bound=`` runs its body
            under an ``If`` on the condition (skipped once it is false); else every step, its
            results selected by ``Where``. On onnxruntime 1.32 the If is faster: heat_equation's
            40 steps in 0.63 vs 0.65 ms at a bound of 40, 0.81 vs 1.51 ms at 80
            (benchmarks/bounded_while.py). tract 0.23 cannot evaluate a Slice of a symbolic size
            in an ``If`` in a Scan body ("Undetermined symbol").
        kernels: ``{op: element types}`` where its kernels differ from onnxruntime CPU's
            (core/kernels.py); inputs of a type not listed are widened.
        rewrites: the graph rewrites (functions declared with ``@rewrite``, in this package's
            module of the runtime; each one's docstring says why) that make its ops compute JAX's
            numbers, e.g. NaN-propagating ``Max``; they run in this order. A clean-up (constant
            folding, loop-invariant nodes hoisted out of Loop/Scan bodies) follows them.
        late_rewrites: rewrites of the graph's structure that run after that clean-up, on the
            graph as it is written, because it would undo them: hoisting a body's invariant
            nodes (some written by ``rewrites``) makes the body read the enclosing graph again.
        ops: the ONNX ops it runs (None: every op this exporter emits); an export that needs
            another one fails before writing, naming the op and the source line.
        kernel_opsets: ``{op: (first, last)}``: the opsets at which it runs ``op`` with a kernel
            of its own; at the others it runs ONNX's function body of the op, expanded into
            small ops (slower than the decomposition a rule writes itself), so rules that can
            choose write their decomposition there (:meth:`has_kernel`).
        domain_ops: the ops of other domains it runs that rules may write where they are
            faster than the standard ops (``"com.microsoft.MultiHeadAttention"``).
        lacks: ``{op: what to do instead}`` for ops it does not run (the export fails before
            writing, naming the op, the source line and the advice).
        lacks_dtypes: ``{element type: what to do instead}`` for tensor types it cannot hold
            (tract has no bfloat16): the export fails before writing, naming the fix.
        lacks_io_dtypes: ``{element type: why}`` for types its API cannot feed or read although
            its kernels hold them (onnxruntime-web has no JavaScript array for bfloat16): such
            graph inputs and outputs are float32, one Cast each (``io_dtype="model"`` fails
            before writing, naming them).
        float64: it computes float64 in float64. OpenVINO's CPU plugin computes it in float32
            (float64 models then match JAX to float32 precision only); nothing in the graph
            can change that.
    """

    name: str
    max_opset: int | None = None
    model_functions: bool = True
    scan_symbolic: bool = False
    scan_ticks: bool = True
    bounded_if: bool = True
    kernels: Mapping[str, str] = field(default_factory=dict)
    rewrites: tuple[Rewrite, ...] = ()
    late_rewrites: tuple[Rewrite, ...] = ()
    ops: frozenset[str] | None = None
    lacks: Mapping[str, str] = field(default_factory=dict)
    kernel_opsets: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    domain_ops: frozenset[str] = frozenset()
    float64: bool = True
    lacks_dtypes: Mapping[str, str] = field(default_factory=dict)
    lacks_io_dtypes: Mapping[str, str] = field(default_factory=dict)

    def runs(self, op: str) -> bool:
        """Whether this runtime runs ONNX op ``op`` (of the default domain)."""
        return (self.ops is None or op in self.ops) and op not in self.lacks

    def has_kernel(self, op: str, opset: int) -> bool:
        """Whether it runs ONNX op ``op`` at ``opset`` with a kernel of its own (see
        ``kernel_opsets``); the caller checks that the opset defines the op."""
        first, last = self.kernel_opsets.get(op, (0, opset))
        return self.runs(op) and first <= opset <= last

    def without(self, *rewrites: Rewrite) -> Target:
        """This profile with ``rewrites`` left out (a test shows what each one is for)."""
        return replace(
            self,
            rewrites=tuple(r for r in self.rewrites if r not in rewrites),
            late_rewrites=tuple(r for r in self.late_rewrites if r not in rewrites),
        )


# CumSum's types on a runtime that sums uint32 (the bitwise ops below opset 18 sum their bits
# with it; onnxruntime has no uint32 CumSum, so the builder widens to int64 for it)
CUMSUM_UINT32 = "i32 i64 u32 u64 f32 f64"

# ReduceMax/Min's types on OpenVINO and tract: uint32 kept (rewritten on 16-bit halves), not widened
# to int64
REDUCE_EXTREMES_UINT32 = "b i8 i32 i64 u8 u32 f16 f32 f64"
