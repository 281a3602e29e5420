"""tract's loop rewrites (core/targets/tract_loops.py): each model is rewritten into the form the
rewrite writes, and runs on tract matching JAX with the rewrite, not without it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx_nn import ConversionError
from jax2onnx_nn.core.targets import tract_loops
from tests.core.targets.rewrite_check import (
    assert_needed,
    exported,
    needs,
    op_counts,
    run_on,
    scan_node,
)

pytestmark = needs("tract")


def _scatter_max(x: jax.Array, rows: jax.Array, updates: jax.Array) -> jax.Array:
    return x.at[rows].max(updates)


def test_scatter_loop_as_one_hot() -> None:
    # below opset 18 ScatterND has no max: the builder writes a Loop over the update rows,
    # which tract cannot run
    specs = [(5,), ((4,), "int32"), (4,)]
    left_out = (tract_loops.scatter_loop_as_one_hot,)
    with pytest.raises(ConversionError, match="target tract cannot run Loop"):
        exported("tract", left_out, _scatter_max, specs, opset=17)
    rewritten = op_counts(exported("tract", (), _scatter_max, specs, opset=17).graph)
    assert rewritten["Loop"] == 0 and rewritten["ReduceMax"] >= 1, rewritten
    x = np.array([0.0, 5.0, -1.0, 2.0, 3.0], np.float32)
    rows = np.array([2, 7, 2, 0], np.int32)  # a repeated row and one out of bounds (dropped)
    updates = np.array([4.0, 9.0, 1.0, -3.0], np.float32)
    assert_needed("tract", left_out[0], _scatter_max, specs, [x, rows, updates], opset=17)


def _tripled(xs: jax.Array) -> jax.Array:
    return lax.scan(lambda n, x: (n * 3, n + x), jnp.int32(1), xs)[1]


def test_scan_int_factors_as_states() -> None:
    specs = [((4,), "int32")]
    left_out = (tract_loops.scan_int_factors_as_states,)
    before = scan_node(exported("tract", left_out, _tripled, specs).graph)
    after = scan_node(exported("tract", (), _tripled, specs).graph)
    # the constant 3 the body multiplied by is now a state the body passes on unchanged
    assert len(after.input) == len(before.input) + 1
    body = next(a.g for a in after.attribute if a.name == "body")
    assert "Identity" in [n.op_type for n in body.node]
    xs = np.array([1, -2, 3, 4], np.int32)
    assert_needed("tract", left_out[0], _tripled, specs, [xs])


def _doubled_rows(xs: jax.Array) -> jax.Array:
    return lax.map(lambda r: lax.fori_loop(0, 3, lambda i, c: c * 2.0 + r, r), xs)


def test_inner_scans_restarted() -> None:
    specs = [(4, 2)]
    left_out = (tract_loops.inner_scans_restarted,)
    before = op_counts(exported("tract", left_out, _doubled_rows, specs).graph)
    after = op_counts(exported("tract", (), _doubled_rows, specs).graph)
    # the inner Scan's body reads its state as Where(tick == first tick, initial value, state)
    assert after["Scan"] == before["Scan"] == 2
    assert after["Equal"] == before["Equal"] + 1 and after["Where"] == before["Where"] + 2
    # run with the rewrite only: without it tract 0.23 aborts the process on this model (a Rust
    # panic Python cannot catch)
    xs = np.arange(8, dtype=np.float32).reshape(4, 2) - 3.0
    outcome = run_on("tract", (), _doubled_rows, specs, [xs])
    assert outcome.ok, outcome.said


def _row_sums(xs: jax.Array) -> jax.Array:
    # a fori_loop of symbolic length in a map: its counter is a Range of run-time length
    return lax.map(lambda r: lax.fori_loop(0, r.shape[0], lambda i, c: c + r[i] * i, 0.0), xs)


def test_ranges_in_scan_bodies() -> None:
    specs = [(3, "N")]
    left_out = (tract_loops.ranges_in_scan_bodies,)
    before = exported("tract", left_out, _row_sums, specs).graph
    after = exported("tract", (), _row_sums, specs).graph
    # the Range hoisted out of the map's body is computed in the body again (a copy)
    assert op_counts(after)["Range"] == op_counts(before)["Range"] + 1
    body = next(a.g for a in scan_node(after).attribute if a.name == "body")
    assert op_counts(body)["Range"] >= 1
    xs = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
    assert_needed("tract", left_out[0], _row_sums, specs, [xs])
