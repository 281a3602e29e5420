"""The passes over the lowered model, one module each, and the order the export runs them in.

:data:`PIPELINE` is the data path after lowering (``export_model`` runs it, ARCHITECTURE.md
states it and a test compares the two); :data:`CLEANUP` is the clean-up it runs twice, once
after lowering and once after the target's rewrites.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx_ir as ir
import onnx_ir.passes.common as common

from jax2onnx_nn.core.ir.census import op_census, run_if_present
from jax2onnx_nn.core.layout import apply_layout
from jax2onnx_nn.core.opset_forms import has_op
from jax2onnx_nn.core.passes.cse import eliminate_common_subexpressions
from jax2onnx_nn.core.passes.dead_loop_state import remove_dead_loop_state
from jax2onnx_nn.core.passes.fold_constants import fold_constants
from jax2onnx_nn.core.passes.fold_weights import fold_into_weights, fold_marked_into_weights
from jax2onnx_nn.core.passes.fuse_attention import attention
from jax2onnx_nn.core.passes.fuse_rotary import interleaved_rotary_embedding, rotary_embedding
from jax2onnx_nn.core.passes.hoist_loop_invariants import hoist_loop_invariants
from jax2onnx_nn.core.passes.hoist_over_split import hoist_layout_over_split
from jax2onnx_nn.core.passes.inline_functions import inline_functions
from jax2onnx_nn.core.passes.keep_reduced_dims import keep_reduced_dims
from jax2onnx_nn.core.passes.layout_chains import cancel_layout_chains
from jax2onnx_nn.core.passes.merge_initializers import merge_duplicate_initializers
from jax2onnx_nn.core.passes.relabel_transposes import relabel_transposes
from jax2onnx_nn.core.passes.remove_unused import remove_unused_nodes
from jax2onnx_nn.core.passes.shape_inference import fill_missing_types
from jax2onnx_nn.core.passes.simplify_plumbing import simplify_plumbing
from jax2onnx_nn.core.passes.unique_names import unique_value_names
from jax2onnx_nn.core.passes.unpoisoned import warn_unpoisoned
from jax2onnx_nn.core.passes.vector_times_untransposed import vector_times_untransposed
from jax2onnx_nn.core.precision import apply_precision, float32_boundary
from jax2onnx_nn.core.quant.dequantize import write_dequantize_linear
from jax2onnx_nn.core.targets import apply_rewrites

if TYPE_CHECKING:
    from jax2onnx_nn.core.config import ExportConfig


def remove_unused_functions(model: ir.Model) -> None:
    """Model-local functions no node calls any more (their calls folded or removed)."""
    if model.functions:  # (the pass walks every node even when there are none)
        common.RemoveUnusedFunctionsPass()(model)


@dataclass(frozen=True)
class Step:
    """One pass of :data:`CLEANUP`: ``option``, a keyword of :func:`cleanup` that turns it on
    (``fold_weights``) or off (``loop_state``), ``otherwise`` what runs in its place when the
    option is off; ``sweep``: :func:`remove_unused_nodes` runs after it when it changed
    something (it leaves what fed the nodes it dropped unread)."""

    run: Callable[[ir.Model], object]
    option: str | None = None
    sweep: bool = False
    otherwise: Callable[[ir.Model], object] | None = None


# The clean-up, in order. The first passes rewrite; the removal of unused nodes then gives the
# passes after it exact reader counts. Merging initializers leaves no node unread; merging
# common subexpressions can leave a small initializer unread (duplicates are told apart from
# their inputs by value: the one of the dropped node goes), so a removal follows it.
CLEANUP: tuple[Step, ...] = (
    Step(hoist_loop_invariants),
    Step(fold_constants),
    Step(simplify_plumbing),
    Step(hoist_layout_over_split),
    Step(cancel_layout_chains),
    Step(keep_reduced_dims),
    Step(remove_unused_nodes),
    Step(remove_dead_loop_state, option="loop_state", sweep=True),
    Step(fold_into_weights, option="fold_weights", sweep=True, otherwise=fold_marked_into_weights),
    Step(merge_duplicate_initializers),
    Step(eliminate_common_subexpressions, sweep=True),
    Step(remove_unused_functions),
)


def cleanup(model: ir.Model, *, fold_weights: bool = False, loop_state: bool = True) -> None:
    """The :data:`CLEANUP` passes in order; ``fold_weights``: also :func:`fold_into_weights`;
    ``loop_state=False``: keep unread loop states (:func:`remove_dead_loop_state` is left
    out, for the clean-up after target rewrites that add such states on purpose: tract's
    counter state). A pass that declares the op types it acts on (:func:`~jax2onnx_nn.core.ir.
    census.rewrites`) is skipped when the model holds none of them."""
    options = {"fold_weights": fold_weights, "loop_state": loop_state}
    census = op_census(model)
    for step in CLEANUP:
        run = step.run
        if step.option is not None and not options[step.option]:
            if step.otherwise is None:
                continue
            run = step.otherwise
        changed = run_if_present(run, model, census) if hasattr(run, "op_types") else run(model)
        if step.sweep and changed:
            remove_unused_nodes(model)


@dataclass
class Export:
    """What the stages of :data:`PIPELINE` share: the model, its export's config, how many
    nodes the target's rewrites changed, and the op census once types are filled in."""

    model: ir.Model
    config: ExportConfig
    rewritten: int = 0
    census: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Stage:
    """One step of the data path after lowering, named as ARCHITECTURE.md names it."""

    name: str
    run: Callable[[Export], None]


def _layout(e: Export) -> None:
    apply_layout(e.model, e.config.inputs_as_nchw, e.config.outputs_as_nchw)


def _inline(e: Export) -> None:
    if e.config.functions == "inline":
        inline_functions(e.model)


def _precision(e: Export) -> None:
    target = e.config.profile
    float32_io = float32_boundary(e.model, target.lacks_io_dtypes, target.name, e.config.io_dtype)
    if e.config.precision != "as-traced" or e.config.io_dtype is not None or float32_io:
        apply_precision(e.model, e.config.precision, e.config.io_dtype, float32_io)


def _cleanup(e: Export) -> None:
    cleanup(e.model, fold_weights=e.config.fold_weights)


def _dequantize_weights(e: Export) -> None:
    if run_if_present(write_dequantize_linear, e.model, op_census(e.model)):
        remove_unused_nodes(e.model)  # (the Cast / Mul chains it replaced)


def _warn_unpoisoned(e: Export) -> None:
    warn_unpoisoned(e.model)  # (results nothing reads are gone now)


# Patterns a model writes out that one ONNX op computes with JAX's numbers, each with the op it
# becomes: fused where the opset defines the op and the target runs it with a kernel of its own.
# (the rotary embeddings first: attention reads a key rotated by RotaryEmbedding as the 3D
# projection it rotates, to take it with the past keys in one Attention)
FUSIONS = (
    (rotary_embedding, "RotaryEmbedding"),
    (interleaved_rotary_embedding, "RotaryEmbedding"),
    (attention, "Attention"),
)


def _fuse_ops(e: Export) -> None:
    opset, target = e.config.opset_version, e.config.profile
    fusions = [f for f, op in FUSIONS if has_op(op, opset) and target.has_kernel(op, opset)]
    if fusions:
        fill_missing_types(e.model)  # (the shapes of the values rules made: masks, tables)
    e.rewritten += apply_rewrites(e.model, fusions)


def _target_rewrites(e: Export) -> None:
    e.rewritten += apply_rewrites(
        e.model, e.config.profile.rewrites
    )  # on folded constants (shift amounts)


def _cleanup_after_rewrites(e: Export) -> None:
    if e.rewritten:
        cleanup(e.model, loop_state=False)  # (states a rewrite adds for its runtime stay)


def _late_rewrites(e: Export) -> None:
    apply_rewrites(
        e.model, e.config.profile.late_rewrites
    )  # after the clean-up, which would undo them


def _fill_missing_types(e: Export) -> None:
    fill_missing_types(e.model)
    e.census = op_census(e.model)  # (the op types the passes below and the target check ask for)


def _vector_times_untransposed(e: Export) -> None:
    run_if_present(
        vector_times_untransposed, e.model, e.census
    )  # ranks known now; onnxruntime miscomputes the other form


def _relabel_transposes(e: Export) -> None:
    run_if_present(
        relabel_transposes, e.model, e.census
    )  # shapes known now (a rule's own Transposes)


def _unique_value_names(e: Export) -> None:
    unique_value_names(e.model)


PIPELINE: tuple[Stage, ...] = (
    Stage("apply_layout", _layout),
    Stage("inline_functions", _inline),
    Stage("apply_precision", _precision),
    Stage("cleanup", _cleanup),
    Stage("dequantize_weights", _dequantize_weights),
    Stage("warn_unpoisoned", _warn_unpoisoned),
    Stage("fuse_ops", _fuse_ops),
    Stage("target_rewrites", _target_rewrites),
    Stage("cleanup_after_rewrites", _cleanup_after_rewrites),
    Stage("late_rewrites", _late_rewrites),
    Stage("fill_missing_types", _fill_missing_types),
    Stage("vector_times_untransposed", _vector_times_untransposed),
    Stage("relabel_transposes", _relabel_transposes),
    Stage("unique_value_names", _unique_value_names),
)


def run_pipeline(
    model: ir.Model, config: ExportConfig, on_stage: Callable[[str], None] | None = None
) -> set[str]:
    """Run :data:`PIPELINE` on ``model`` (``on_stage(name)`` before each stage, for progress);
    returns the op census of the finished model (its op types of the default domain)."""
    export = Export(model, config)
    for stage in PIPELINE:
        if on_stage is not None:
            on_stage(stage.name)
        stage.run(export)
    return export.census


__all__ = [
    "CLEANUP",
    "PIPELINE",
    "Stage",
    "Step",
    "cancel_layout_chains",
    "cleanup",
    "eliminate_common_subexpressions",
    "fill_missing_types",
    "fold_constants",
    "fold_into_weights",
    "hoist_layout_over_split",
    "hoist_loop_invariants",
    "inline_functions",
    "keep_reduced_dims",
    "merge_duplicate_initializers",
    "relabel_transposes",
    "remove_dead_loop_state",
    "remove_unused_functions",
    "remove_unused_nodes",
    "run_pipeline",
    "simplify_plumbing",
    "vector_times_untransposed",
]
