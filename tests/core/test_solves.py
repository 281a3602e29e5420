"""tridiagonal_solve, custom_linear_solve, symmetric_product, cholesky_update and the jnp
functions that reach them or other solves (tensorsolve, tensorinv, cg): onnxruntime vs JAX on
hypothesis-drawn sizes, batch dims, dtypes and matrices (float32 1e-5, float64 1e-10)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jax.scipy.sparse import linalg as jssl

from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on
from jax2onnx_nn.testing.assertions import op_types
from jax2onnx_nn.testing.roundtrip import roundtrip
from tests.core.test_decompositions import BATCHES, DTYPES, SEEDS, SIZES, _tol, general, spd


def _diagonals(seed: int, batch: tuple, m: int, dtype, dominant: bool) -> list[np.ndarray]:
    """dl, d, du: Gaussian; ``dominant`` adds 4 to d (no row swaps), else gtsv pivots."""
    rng = np.random.default_rng(seed)
    dl, d, du = (rng.normal(size=(*batch, m)) for _ in range(3))
    return [v.astype(dtype) for v in (dl, d + 4 * dominant, du)]


# Each property runs representative cases by default (both dtypes, batched and not) and its
# hypothesis draws with --run-slow.


# -- tridiagonal_solve -------------------------------------------------------------------------
def check_tridiagonal_solve(m, k, batch, dtype, seed, dominant):
    """Diagonally dominant systems (the Thomas algorithm) and general ones (gtsv's row swaps;
    their conditioning varies, so they are compared at 1e-4 / 1e-8)."""
    b = np.random.default_rng(seed + 1).normal(size=(*batch, m, k)).astype(dtype)
    tol = _tol(dtype) if dominant else {k: v * 10 for k, v in _tol(dtype).items()}
    assert_exports_match_on(
        lax.linalg.tridiagonal_solve,
        *_diagonals(seed, batch, m, dtype, dominant),
        b,
        **tol,
        jit=True,
    )


@pytest.mark.parametrize(
    ("m", "k", "batch", "dtype", "dominant"),
    [(5, 3, (2,), np.float32, True), (5, 1, (), np.float64, False)],
)
def test_tridiagonal_solve_matches_jax(m, k, batch, dtype, dominant):
    check_tridiagonal_solve(m, k, batch, dtype, 0, dominant)


@pytest.mark.slow
@settings(max_examples=3)
@given(
    m=SIZES,
    k=st.sampled_from([1, 3]),
    batch=BATCHES,
    dtype=DTYPES,
    seed=SEEDS,
    dominant=st.booleans(),
)
def test_tridiagonal_solve_property(m, k, batch, dtype, seed, dominant):
    check_tridiagonal_solve(m, k, batch, dtype, seed, dominant)


def test_tridiagonal_solve_symbolic_batch_and_vmap():
    values = [
        [*_diagonals(s, (b,), 5, np.float32, True), np.ones((b, 5, 2), np.float32)]
        for s, b in enumerate([1, 4])
    ]
    for v in values:
        assert_exports_match(
            lax.linalg.tridiagonal_solve, [("B", 5)] * 3 + [("B", 5, 2)], input_values=v, jit=True
        )
    dl, d, du = _diagonals(0, (3,), 4, np.float32, False)
    assert_exports_match_on(
        jax.vmap(lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b[:, None])),
        dl,
        d,
        du,
        d * 2,
        rtol=1e-4,
        jit=True,
    )


@pytest.mark.parametrize("size", [24, pytest.param(64, marks=pytest.mark.slow)])
def test_tridiagonal_solve_looped(size):
    """Above the unroll limit: one Loop for the elimination, one for the substitution."""
    (*diags,) = _diagonals(size, (2,), size, np.float64, True)
    model = assert_exports_match_on(
        lax.linalg.tridiagonal_solve, *diags, np.ones((2, size, 2)), **_tol(np.float64), jit=True
    )
    assert len(model.graph.node) < 40


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tridiagonal_solve_singular_is_nan(dtype):
    """gtsv stops at an exact zero pivot; JAX makes that system's solution NaN."""
    dl, d, du = (
        np.array(v, dtype)
        for v in ([[0, 0, 1], [0, 1, 1]], [[1, 0, 1], [2, 2, 2]], [[0, 0, 0], [1, 1, 0]])
    )
    assert_exports_match_on(
        lax.linalg.tridiagonal_solve, dl, d, du, np.ones((2, 3, 1), dtype), jit=True
    )


def test_tridiagonal_solve_perturbed_is_refused():
    d = np.ones((3,), np.float32)
    with pytest.raises(ConversionError, match="perturb_singular"):
        roundtrip(
            lambda d: lax.linalg.tridiagonal_solve(d, d, d, d[:, None], perturb_singular=True),
            [d.shape],
            input_values=[d],
        )


def test_eigh_tridiagonal_eigenvectors_are_refused_with_what_to_use():
    """eigh_tridiagonal's eigenvectors come from perturbed tridiagonal solves: the error names
    the user's line and eigh of the full matrix, which exports (checked here too)."""
    d, e = np.array([2.0, 1.0, 3.0, -1.0], np.float32), np.array([0.5, -1.0, 0.25], np.float32)

    def vectors(d, e):
        return jax.scipy.linalg.eigh_tridiagonal(d, e, eigvals_only=False)[1]

    with pytest.raises(ConversionError) as info:
        roundtrip(vectors, [d.shape, e.shape], input_values=[d, e])
    assert f"{__file__}:{vectors.__code__.co_firstlineno + 1}" in str(info.value)
    assert "jnp.linalg.eigh(jnp.diag(d) + jnp.diag(e, 1) + jnp.diag(e, -1))" in str(info.value)
    assert_exports_match_on(
        lambda d, e: jnp.linalg.eigvalsh(jnp.diag(d) + jnp.diag(e, 1) + jnp.diag(e, -1)), d, e
    )


# -- custom_linear_solve -----------------------------------------------------------------------
SOLVES = {
    # a user solve that itself calls a custom_linear_solve (jnp.linalg.solve does)
    "nested": lambda a, b: lax.custom_linear_solve(
        lambda x: a @ x, b, lambda mv, b: jnp.linalg.solve(a, b)
    ),
    "symmetric": lambda a, b: lax.custom_linear_solve(
        lambda x: a @ x, b, lambda mv, b: jnp.linalg.solve(a, b), symmetric=True
    ),
    "pytree": lambda a, b: lax.custom_linear_solve(
        lambda x: {"u": a @ x["u"], "v": 2 * x["v"]},
        {"u": b, "v": b},
        lambda mv, r: {"u": jnp.linalg.solve(a, r["u"]), "v": r["v"] / 2},
    ),
    "cg": lambda a, b: jssl.cg(a, b, tol=1e-12, maxiter=50)[0],
    "solve": lambda a, b: jnp.linalg.solve(a, b),
}


def check_custom_linear_solve(name, n, dtype, seed):
    a, b = spd(seed, (), n, dtype), np.random.default_rng(seed + 1).normal(size=(n,)).astype(dtype)
    tol = (
        _tol(dtype)
        if name != "cg"
        else {
            "rtol": 1e-4 if dtype == np.float32 else 1e-9,
            "atol": 1e-4 if dtype == np.float32 else 1e-9,
        }
    )
    assert_exports_match_on(SOLVES[name], a, b, **tol, jit=True)


@pytest.mark.parametrize(
    ("name", "dtype"), [(name, (np.float32, np.float64)[i % 2]) for i, name in enumerate(SOLVES)]
)
def test_custom_linear_solve_matches_jax(name, dtype):
    check_custom_linear_solve(name, 3, dtype, 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", SOLVES)
@settings(max_examples=2)
@given(n=st.sampled_from([1, 3, 6]), dtype=DTYPES, seed=SEEDS)
def test_custom_linear_solve_property(name, n, dtype, seed):
    check_custom_linear_solve(name, n, dtype, seed)


# jnp.linalg.solve's custom_linear_solve (lu_solve with the lu of its matvec's matrix) of a small
# matrix is one elimination on [a | b]: its b laid out as the matvec says, the rows swapped as
# getrf swaps them (ties among integer entries too), a zero pivot left as getf2 leaves it
SOLVE_LAYOUTS = {
    "batched": ((2, 4, 4), (2, 4, 3)),
    "vector": ((4, 4), (4,)),
    "matrix": ((5, 5), (5, 2)),
    "broadcast_a": ((4, 4), (2, 4, 3)),
    "two_batch_dims": ((2, 3, 4, 4), (3, 4, 1)),
    "one_by_one": ((3, 1, 1), (3, 1, 2)),
    "largest_unrolled": ((2, 16, 16), (2, 16, 1)),
}


@pytest.mark.parametrize("layout", SOLVE_LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solve_eliminates_a_and_b_together(layout, dtype):
    """Gaussian matrices (rows swapped), every layout of b JAX's solve gives the solve: no
    L solve (MatMul), no permutation of b (a gather by index) left in the graph; the only
    GatherNDs are the last elimination step's two rows (pivot and other)."""
    sa, sb = SOLVE_LAYOUTS[layout]
    rng = np.random.default_rng(len(layout))
    a, b = rng.normal(size=sa).astype(dtype), rng.normal(size=sb).astype(dtype)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 and sa[-1] == 16 else _tol(dtype)
    model = assert_exports_match_on(jnp.linalg.solve, a, b, **tol, jit=True)
    ops = op_types(model)
    assert (
        "MatMul" not in ops
        and "Gather" not in ops
        and ops.count("GatherND") == (2 if sa[-1] >= 2 else 0)
    ), ops


@pytest.mark.parametrize("seed", range(4))
def test_solve_and_inv_pivot_on_ties_as_getrf(seed):
    """Small integer entries: equal magnitudes in a column, the first row in getrf's swapped
    order is the pivot (a different one rounds differently)."""
    rng = np.random.default_rng(seed)
    a, b = (
        rng.integers(-2, 3, size=(6, 4, 4)).astype(np.float32),
        rng.integers(-2, 3, size=(6, 4, 2)).astype(np.float32),
    )
    a[:, range(4), range(4)] += 0.5 * (rng.integers(0, 2, size=(6, 4)))  # fewer singular ones
    assert_exports_match_on(jnp.linalg.solve, a, b, rtol=1e-5, atol=1e-5, jit=True)
    assert_exports_match_on(jnp.linalg.inv, a, rtol=1e-5, atol=1e-5, jit=True)


SINGULAR = {
    "zero_pivot_in_the_middle": [[1.0, 2, 3], [2, 4, 7], [3, 6, 1]],
    "zero_first_column": [[0.0, 1, 2], [0, 3, 4], [0, 5, 7]],
    "zero_row": [[2.0, 1, 0, 0], [4, 2, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]],
    "ones": [[1.0, 1, 1], [1, 1, 1], [1, 1, 1]],
    "zeros": [[0.0, 0], [0, 0]],
    "inf": [[1.0, 2], [np.inf, 1]],
    "nan_in_a_pivot_column": [[1.0, 2, 3], [3, np.nan, 0], [2, 0, 1]],
    # above 5 rows U's columns are divided by their pivots before the substitution
    "rank_5_of_6": [
        [1.0, 2, 2, 0, 1, 3],
        [2, 1, 4, 1, 0, 1],
        [0, 3, 0, 2, 1, 0],
        [1, 1, 2, 1, 1, 1],
        [3, 0, 6, 0, 2, 1],
        [1, 2, 2, 2, 0, 1],
    ],
}


@pytest.mark.parametrize("name", SINGULAR)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solve_and_inv_of_singular_matrices_as_jax(name, dtype):
    """getf2 skips the division by a zero pivot and U's substitution divides by it: the
    inf/NaN pattern of JAX's solution, for right-hand sides with zeros and without."""
    a = np.array(SINGULAR[name], dtype)
    n = a.shape[-1]
    for b in (np.ones(n), np.arange(n), np.eye(n)[:, :2]):
        assert_exports_match_on(jnp.linalg.solve, a, b.astype(dtype), jit=True)
    assert_exports_match_on(jnp.linalg.inv, a, jit=True)


def test_a_custom_solve_by_lu_is_run_as_written():
    """A custom_linear_solve whose solve is another use of the lu (here the transposed solve)
    is lowered as its own jaxpr, not as jnp.linalg.solve's elimination."""
    import jax.scipy.linalg as jsl

    def solve(a, b):
        factors = jsl.lu_factor(a)
        return lax.custom_linear_solve(
            lambda x: a.T @ x, b, lambda mv, r: jsl.lu_solve(factors, r, trans=1)
        )

    a, b = general(2, (), 4, shift=0.0), np.arange(4.0, dtype=np.float32)
    model = assert_exports_match_on(solve, a, b, **_tol(np.float32), jit=True)
    assert "MatMul" in op_types(model)  # lu_solve applies L^T by powers of its triangle


@pytest.mark.parametrize("after", ["scaled", "shifted"])
def test_a_custom_solve_with_more_than_lu_solve_is_run_as_written(after):
    """A solve that calls JAX's own ``_lu_solve`` (as jnp.linalg.solve does) with the lu of
    the matvec's matrix, then computes more, keeps what it computes after the lu_solve."""
    from jax._src.lax import linalg as lax_linalg

    def solve(a, b):
        lu, _, perm = lax.linalg.lu(a)
        more = {"scaled": lambda x: 2.0 * x, "shifted": lambda x: x + b}[after]
        return lax.custom_linear_solve(
            lambda x: a @ x, b, lambda mv, r: more(lax_linalg._lu_solve(lu, perm, r, trans=0))
        )

    a, b = general(3, (), 4, shift=4.0), np.arange(4.0, dtype=np.float32)
    assert_exports_match_on(solve, a, b, **_tol(np.float32), jit=True)


# -- symmetric_product, cholesky_update --------------------------------------------------------
def check_symmetric_product(m, n, batch, dtype, seed, alpha, beta, symmetrize):
    rng = np.random.default_rng(seed)
    a, c = (
        rng.normal(size=(*batch, m, n)).astype(dtype),
        rng.normal(size=(*batch, m, m)).astype(dtype),
    )

    def fn(a, c):
        return lax.linalg.symmetric_product(
            a, c, alpha=alpha, beta=beta, symmetrize_output=symmetrize
        )

    assert_exports_match_on(fn, a, c, **_tol(dtype), jit=True)


@pytest.mark.parametrize(
    ("m", "n", "batch", "dtype", "alpha", "beta", "symmetrize"),
    [
        (5, 4, (2,), np.float32, -0.5, 2.0, True),
        (2, 1, (), np.float64, 1.0, 0.0, False),
    ],
)
def test_symmetric_product_matches_jax(m, n, batch, dtype, alpha, beta, symmetrize):
    check_symmetric_product(m, n, batch, dtype, 0, alpha, beta, symmetrize)


@pytest.mark.slow
@settings(max_examples=3)
@given(
    m=SIZES,
    n=st.sampled_from([1, 4]),
    batch=BATCHES,
    dtype=DTYPES,
    seed=SEEDS,
    alpha=st.sampled_from([1.0, -0.5]),
    beta=st.sampled_from([0.0, 2.0]),
    symmetrize=st.booleans(),
)
def test_symmetric_product_property(m, n, batch, dtype, seed, alpha, beta, symmetrize):
    check_symmetric_product(m, n, batch, dtype, seed, alpha, beta, symmetrize)


def check_cholesky_update(n, dtype, seed, zeros):
    """R of an SPD matrix and w Gaussian, or with zeros (no rotation for w[k] = 0)."""
    rng = np.random.default_rng(seed)
    r = np.linalg.cholesky(spd(seed, (), n, np.float64)).T.astype(dtype)
    w = rng.normal(size=(n,)) * (rng.random(n) < 0.5 if zeros else 1)
    assert_exports_match_on(lax.linalg.cholesky_update, r, w.astype(dtype), **_tol(dtype), jit=True)


@pytest.mark.parametrize(("n", "dtype", "zeros"), [(5, np.float32, True), (2, np.float64, False)])
def test_cholesky_update_matches_jax(n, dtype, zeros):
    check_cholesky_update(n, dtype, 0, zeros)


@pytest.mark.slow
@settings(max_examples=3)
@given(
    n=st.sampled_from([0, 1, 2, 5]), dtype=DTYPES, seed=SEEDS, zeros=st.booleans()
)  # 20: looped, below
def test_cholesky_update_property(n, dtype, seed, zeros):
    check_cholesky_update(n, dtype, seed, zeros)


@pytest.mark.slow
def test_cholesky_update_looped():
    r = np.linalg.cholesky(spd(3, (), 20, np.float64)).T
    assert_exports_match_on(
        lax.linalg.cholesky_update, r, np.ones(20), **_tol(np.float64), jit=True
    )


# -- jnp functions on the solves ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64])
def test_tensorsolve_tensorinv_match_jax(dtype):
    a = general(0, (), 6, dtype=dtype).reshape(2, 3, 6)
    b = np.random.default_rng(1).normal(size=(2, 3)).astype(dtype)
    assert_exports_match_on(jnp.linalg.tensorsolve, a, b, **_tol(dtype), jit=True)
    assert_exports_match_on(lambda a: jnp.linalg.tensorinv(a, ind=2), a, **_tol(dtype), jit=True)


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        (
            "expm",
            jax.scipy.linalg.expm,
        ),  # Pade + scaling and squaring (binds lax.log2 on JAX >= 0.12)
        ("polyfit", lambda x: jnp.polyfit(x[0], x[1], 3)),  # a least-squares solve (svd)
    ],
)
def test_expm_polyfit_match_jax(name, fn):
    x = np.random.default_rng(5).normal(size=(4, 4)) / 2
    assert_exports_match_on(fn, x, rtol=1e-8, atol=1e-10, jit=True)


@pytest.mark.parametrize("n", [4, 9])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solve_elimination_keeps_each_batch_element_and_column_apart(n, dtype):
    """One elimination on [a | b] for the whole batch: a singular matrix (a zero column) next to
    regular ones, a NaN and an inf in b only, b with zero columns: each element's and each
    column's values (or inf/NaN pattern) as JAX's; a symbolic number of right-hand sides."""
    rng = np.random.default_rng(n)
    a = rng.normal(size=(3, n, n)).astype(dtype)
    a[1, :, 2] = 0
    b = rng.normal(size=(3, n, 2)).astype(dtype)
    b[0, 1, 0], b[2, 2, 1] = np.nan, np.inf
    tol = {"rtol": 1e-3, "atol": 1e-4} if dtype == np.float32 else _tol(dtype)
    assert_exports_match_on(jnp.linalg.solve, a, b, jit=True, **tol)
    assert_exports_match_on(jnp.linalg.inv, a, jit=True, **tol)
    assert_exports_match_on(jnp.linalg.solve, a, np.zeros((3, n, 0), dtype), jit=True)
    name = np.dtype(dtype).name
    assert_exports_match(
        jnp.linalg.solve,
        [((n, n), name), ((n, "K"), name)],
        sizes={"K": [1, 3]},
        enable_double_precision=dtype == np.float64,
        **tol,
    )
