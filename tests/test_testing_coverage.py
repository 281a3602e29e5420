"""The recording plugin (jax2onnx_nn.testing.coverage): which rule the ops of an export are
recorded for, so that the support table's check (test_readme) sees every op of a primitive's
exported graph, its Loop bodies and the algorithm its rule lowers included."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import onnx
import pytest
from jax import lax

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core import registry
from jax2onnx_nn.testing.coverage import _Recorder, carries_code, read_emitted, recording


def _all_op_types(graph: onnx.GraphProto) -> set[str]:
    """The op types of a graph's nodes and of the nodes of every body graph in it."""
    ops = set()
    for node in graph.node:
        ops.add(node.op_type)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                ops |= _all_op_types(attribute.g)
    return ops


def _recorded(fn, specs) -> tuple[onnx.ModelProto, dict[str, set[str]], set[str]]:
    """The model, the ops recorded per primitive, and the ops of nobody's nodes (dims)."""
    emitted: set[tuple[str, str]] = set()
    plumbing: set[str] = set()
    with recording(set(), emitted, plumbing):
        model = to_onnx(fn, specs)
    ops: dict[str, set[str]] = {}
    for name, op_type in emitted:
        ops.setdefault(name, set()).add(op_type)
    return model, ops, plumbing


@pytest.mark.parametrize("n", [4, 20], ids=["unrolled", "looped"])
def test_a_rule_that_lowers_its_own_algorithm_owns_its_ops(n):
    """svd lowers its Jacobi sweeps as JAX code: every op of its exported graph, the ops of the
    sweep Loop's body and of the rules its algorithm's equations took included, is recorded
    for svd; so its support-table row is checked against all of them."""
    model, ops, _ = _recorded(lambda a: lax.linalg.svd(a, compute_uv=False), [(n, n)])
    assert _all_op_types(model.graph) <= ops["svd"]
    assert {"Loop", "Mul", "Sqrt"} <= ops["svd"]
    assert ops["svd"] <= set(registry.lookup("svd").onnx_ops)


# the linalg primitives, each on its own (plus what jnp adds around it), as (fn, specs of size n)
LINALG = {
    "cholesky": (lambda a: lax.linalg.cholesky(a, symmetrize_input=False), lambda n: [n]),
    "triangular_solve": (
        lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
        lambda n: [n, (n[0], 2)],
    ),
    "lu": (lax.linalg.lu, lambda n: [n]),
    "lu_pivots_to_permutation": (
        lambda p: lax.linalg.lu_pivots_to_permutation(p, 6),
        lambda n: [((6,), "int32")],
    ),
    "solve": (jnp.linalg.solve, lambda n: [n, (n[0], 2)]),
    "inv": (jnp.linalg.inv, lambda n: [n]),
    "slogdet": (jnp.linalg.slogdet, lambda n: [n]),
    "qr": (jnp.linalg.qr, lambda n: [n]),
    "qr_pivoting": (lambda a: jsl.qr(a, pivoting=True), lambda n: [n]),
    "householder_product": (lambda a: lax.linalg.householder_product(a, a[0]), lambda n: [n]),
    "ormqr": (
        lambda a, taus, c: lax.linalg.ormqr(a, taus, c, transpose=True),
        lambda n: [n, n[1:], (n[0], 2)],
    ),
    "ormqr_right": (
        lambda a, taus, c: lax.linalg.ormqr(a, taus, c, left=False),
        lambda n: [n, n[1:], (2, n[0])],
    ),
    "geqp3": (  # with ormqr
        lambda a, c: jsl.qr_multiply(a, c, pivoting=True),
        lambda n: [n, (2, n[0])],
    ),
    "eigh": (jnp.linalg.eigh, lambda n: [n]),
    "eigvalsh": (jnp.linalg.eigvalsh, lambda n: [n]),
    "svd": (jnp.linalg.svd, lambda n: [n]),
    "svdvals": (jnp.linalg.svdvals, lambda n: [n]),
    "svd_tall": (lambda a: jnp.linalg.svd(a, full_matrices=False), lambda n: [(2 * n[0], 3)]),
    "eig": (jnp.linalg.eig, lambda n: [n]),
    "schur": (jsl.schur, lambda n: [n]),
    "hessenberg": (jsl.hessenberg, lambda n: [n]),
    "tridiagonal": (lambda a: lax.linalg.tridiagonal(a), lambda n: [n]),
    "tridiagonal_solve": (
        lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b),
        lambda n: [n[:1]] * 3 + [(n[0], 2)],
    ),
    "cholesky_update": (lambda a, w: lax.linalg.cholesky_update(a, w), lambda n: [n, n[:1]]),
    "symmetric_product": (lambda a, c: lax.linalg.symmetric_product(a, c), lambda n: [n, n]),
}
# a size of each path: unrolled (up to UNROLL_LIMIT), looped or blocked (above), symbolic
SIZES = {"unrolled": (4, 4), "looped": (20, 20), "symbolic": ("N", "N")}
STATIC_ONLY = {
    "svd_tall",
    "eig",
    "schur",
    "hessenberg",
    "tridiagonal",
    "lu_pivots_to_permutation",
    "cholesky_update",
    "symmetric_product",
    "householder_product",
    "qr_pivoting",
}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("case", list(LINALG))
def test_every_op_of_a_linalg_export_is_in_its_support_table_row(case, size):
    """The support table lists every op a linalg primitive's exported graph can hold: each rule's
    recorded ops (its algorithm's, Loop bodies included) are in its ``onnx_ops=``, and every
    op of the exported graph (clean-up done) is in the row of a primitive the export lowered
    (or of the symbolic dims' arithmetic, a ``Shape`` of the input: no primitive's)."""
    if size == "symbolic" and case in STATIC_ONLY:
        pytest.skip("a static size only")
    fn, specs = LINALG[case]
    model, ops, plumbing = _recorded(fn, specs(SIZES[size]))
    undeclared = {
        name: sorted(emitted - set(registry.lookup(name).onnx_ops)) for name, emitted in ops.items()
    }
    assert {name: missing for name, missing in undeclared.items() if missing} == {}
    declared = set().union(*(registry.lookup(name).onnx_ops for name in ops))
    assert _all_op_types(model.graph) - declared - plumbing == set()


def test_a_rule_that_lowers_the_users_code_does_not_own_its_ops():
    """A while loop's body is the user's code: its ops are its own rules', not while's (nor,
    around it, a pjit's)."""
    _, ops, _ = _recorded(
        lambda x: lax.while_loop(lambda x: jnp.sum(x) < 3, lambda x: jnp.sin(x) + 1, x), [(3,)]
    )
    assert "Sin" in ops["sin"] and "Loop" in ops["while"]
    assert "Sin" not in ops["while"]


def test_code_among_params_is_a_jaxpr_or_a_function():
    closed = jax.make_jaxpr(jnp.sin)(1.0)
    assert carries_code({"jaxpr": closed}) and carries_code({"branches": (closed, closed)})
    assert carries_code({"callback": print}) and carries_code({"static": (object(), np.sin)})
    assert not carries_code(
        {
            "full_matrices": True,
            "dtype": np.float32,
            "new_dtype": np.dtype("float32"),
            "axes": (0, 1),
        }
    )


def test_a_partial_record_is_added_to_the_committed_one(tmp_path):
    """``gen_support_table.py --record <tests>`` runs a subset: what it records is added to
    the records (a rule's ops from the other tests stay), a whole run rewrites them."""
    lowered = tmp_path / "lowered_primitives.txt"
    lowered.write_text("# header\nsin\n")
    (tmp_path / "emitted_ops.txt").write_text("# header\nsin Sin\n")
    recorder = _Recorder(lowered, merge=True)
    recorder.passed, recorder.emitted = {"cos"}, {("cos", "Cos"), ("sin", "Cast")}
    recorder.write()
    assert read_emitted(tmp_path / "emitted_ops.txt") == {"sin": {"Sin", "Cast"}, "cos": {"Cos"}}
    assert {line for line in lowered.read_text().splitlines() if not line.startswith("#")} == {
        "sin",
        "cos",
    }
    recorder = _Recorder(lowered)
    recorder.passed, recorder.emitted = {"cos"}, {("cos", "Cos")}
    recorder.write()
    assert read_emitted(tmp_path / "emitted_ops.txt") == {"cos": {"Cos"}}
