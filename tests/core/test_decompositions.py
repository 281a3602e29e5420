"""lax.linalg factorizations and solves, and the jnp.linalg / jax.scipy.linalg functions built
on them: onnxruntime vs JAX on hypothesis-drawn sizes, batch dims, dtypes and well-conditioned
matrices, the degenerate inputs LAPACK defines (singular, not PD, NaN, size 0), and graph sizes.

Matrices come from a drawn seed: SPD ones as ``m m^T / n + I`` and general ones as Gaussian plus
``n I``, so solves are well conditioned and JAX's and our rounding stay within the tolerances
(float32 1e-5, float64 1e-10 relative).
"""

import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.lowerings.lapack import steps
from jax2onnx_nn.core.verify import run_onnx
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on
from jax2onnx_nn.testing.assertions import op_types

SIZES = st.sampled_from([0, 1, 2, 5, 16])
BATCHES = st.sampled_from([(), (2,), (1, 3)])
DTYPES = st.sampled_from([np.float32, np.float64])
SEEDS = st.integers(0, 2**16)


def _tol(dtype) -> dict:
    return (
        {"rtol": 1e-10, "atol": 1e-10}
        if np.dtype(dtype) == np.float64
        else {"rtol": 1e-5, "atol": 1e-5}
    )


def spd(seed: int, batch: tuple, n: int, dtype=np.float32) -> np.ndarray:
    m = np.random.default_rng(seed).normal(size=(*batch, n, n))
    return (m @ np.swapaxes(m, -1, -2) / max(n, 1) + np.eye(n)).astype(dtype)


def general(
    seed: int, batch: tuple, n: int, k: int | None = None, dtype=np.float32, shift: float = 1.0
) -> np.ndarray:
    """Gaussian (n, k), plus ``shift * n`` on the diagonal (well conditioned for solves)."""
    k = n if k is None else k
    m = np.random.default_rng(seed).normal(size=(*batch, n, k))
    return (m + shift * max(n, 1) * np.eye(n, k)).astype(dtype)


def rhs(seed: int, batch: tuple, n: int, k: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed + 1).normal(size=(*batch, n, k)).astype(dtype)


# -- primitives --------------------------------------------------------------------------------
# Each property runs representative cases by default (both dtypes, batched and not, the
# flags both ways) and its hypothesis draws with --run-slow.
def check_cholesky(n, batch, dtype, seed):
    a = spd(seed, batch, n, dtype) + np.triu(
        general(seed, batch, n, dtype=dtype), 1
    )  # upper is not read
    assert_exports_match_on(
        lambda a: lax.linalg.cholesky(a, symmetrize_input=False), a, **_tol(dtype), jit=True
    )


@pytest.mark.parametrize(("n", "batch", "dtype"), [(5, (2,), np.float32), (2, (), np.float64)])
def test_cholesky_matches_jax(n, batch, dtype):
    check_cholesky(n, batch, dtype, 0)


@pytest.mark.slow
@given(n=SIZES, batch=BATCHES, dtype=DTYPES, seed=SEEDS)
def test_cholesky_property(n, batch, dtype, seed):
    check_cholesky(n, batch, dtype, seed)


TRSM_FLAGS = ("left_side", "lower", "transpose_a", "unit_diagonal", "conjugate_a")


@pytest.mark.parametrize(
    ("n", "k", "batch", "dtype", "flags"),
    [
        (5, 3, (2,), np.float32, (True, True, False, False, False)),
        (2, 1, (), np.float64, (False, False, True, True, True)),
    ],
)
def test_triangular_solve_matches_jax(n, k, batch, dtype, flags):
    check_triangular_solve(n, k, batch, dtype, 0, **dict(zip(TRSM_FLAGS, flags, strict=True)))


@pytest.mark.slow
@given(
    n=SIZES,
    k=st.sampled_from([1, 3]),
    batch=BATCHES,
    dtype=DTYPES,
    seed=SEEDS,
    left_side=st.booleans(),
    lower=st.booleans(),
    transpose_a=st.booleans(),
    unit_diagonal=st.booleans(),
    conjugate_a=st.booleans(),
)
def test_triangular_solve_property(
    n, k, batch, dtype, seed, left_side, lower, transpose_a, unit_diagonal, conjugate_a
):
    check_triangular_solve(
        n, k, batch, dtype, seed, left_side, lower, transpose_a, unit_diagonal, conjugate_a
    )


def check_triangular_solve(
    n, k, batch, dtype, seed, left_side, lower, transpose_a, unit_diagonal, conjugate_a
):
    a = general(seed, batch, n, dtype=dtype)  # both triangles set: only the named one is read
    b = (
        rhs(seed, batch, n, k, dtype)
        if left_side
        else np.swapaxes(rhs(seed, batch, n, k, dtype), -1, -2)
    )
    if unit_diagonal:  # the unit triangle must be well conditioned too
        a = np.where(np.eye(n, dtype=bool), a, a / max(n, 1))
    flags = dict(
        left_side=left_side,
        lower=lower,
        transpose_a=transpose_a,
        conjugate_a=conjugate_a,
        unit_diagonal=unit_diagonal,
    )
    assert_exports_match_on(
        lambda a, b: lax.linalg.triangular_solve(a, b, **flags), a, b, **_tol(dtype), jit=True
    )


@pytest.mark.parametrize(
    ("n", "dtype", "flags"),
    [
        (17, np.float64, (True, True, False, False, False)),
        (17, np.float32, (False, True, True, True, False)),
        (40, np.float32, (True, False, False, False, False)),
        (40, np.float64, (True, False, True, False, False)),
    ],
)
def test_blocked_triangular_solve(n, dtype, flags):
    """Above the unroll limit by blocks of rows (17: padded to 18; 40: to 42), every
    direction; a zero pivot (inf/NaN as JAX) and a symbolic batch."""
    assert n > steps.UNROLL_LIMIT
    check_triangular_solve(n, 2, (2,), dtype, 5, *flags)
    if flags[0] and not flags[2]:
        a, b = general(5, (2,), n, dtype=dtype), rhs(5, (2,), n, 2, dtype)
        a[1, n - 2, n - 2] = 0.0
        solve = lambda a, b: lax.linalg.triangular_solve(  # noqa: E731
            a, b, left_side=True, lower=flags[1]
        )
        assert_exports_match_on(solve, a, b, **_tol(dtype), jit=True)
        assert_exports_match(
            solve,
            [("B", n, n), ("B", n, 2)],
            input_values=[a, b],
            **_tol(dtype),
            enable_double_precision=dtype == np.float64,
            jit=True,
        )


@pytest.mark.parametrize("n", [4, 16])
def test_solves_with_a_matrix_and_its_transpose_share_its_diagonal(n):
    """cho_solve's two solves (L, then L^T) read one diagonal of L: one masked sum."""
    a, b = np.linalg.cholesky(spd(n, (2,), n, np.float64)).astype(np.float32), rhs(n, (2,), n, 2)

    def both(a, b):
        z = lax.linalg.triangular_solve(a, b, left_side=True, lower=True)
        return lax.linalg.triangular_solve(a, z, left_side=True, lower=True, transpose_a=True)

    model = assert_exports_match_on(both, a, b, **_tol(np.float32), jit=True)
    assert op_types(model).count("ReduceSum") == 1, op_types(model)


@pytest.mark.parametrize(
    ("n", "dtype"), [(17, np.float64), pytest.param(40, np.float32, marks=pytest.mark.slow)]
)
def test_blocked_lu(n, dtype):
    """Above the unroll limit a square lu runs by blocks of columns (17: padded to 18; 40: to
    42): Gaussian matrices (pivoting exercised), a zero column (getf2 skips the zero pivot,
    det 0), a symbolic batch, and solve/det on top."""
    assert n > steps.UNROLL_LIMIT
    a = general(4, (2,), n, dtype=dtype, shift=0.0)
    assert_exports_match_on(lax.linalg.lu, a, **_tol(dtype), jit=True)
    singular = a.copy()
    singular[1, :, n // 2] = 0.0
    assert_exports_match_on(lax.linalg.lu, singular, **_tol(dtype), jit=True)
    assert_exports_match_on(jnp.linalg.det, singular[1], jit=True)
    well = general(4, (2,), n, dtype=dtype)
    assert_exports_match_on(
        jnp.linalg.solve, well, rhs(4, (2,), n, 2, dtype), **_tol(dtype), jit=True
    )
    if dtype == np.float32:
        assert_exports_match(
            lax.linalg.lu, [("B", n, n)], input_values=[a], rtol=1e-5, atol=1e-5, jit=True
        )


def check_lu(shape, batch, dtype, seed):
    a = general(seed, batch, *shape, dtype=dtype, shift=0.0)  # pivoting is exercised
    assert_exports_match_on(lax.linalg.lu, a, **_tol(dtype), jit=True)


@pytest.mark.parametrize(
    ("shape", "batch", "dtype"), [((3, 5), (2,), np.float32), ((5, 5), (), np.float64)]
)
def test_lu_matches_jax(shape, batch, dtype):
    check_lu(shape, batch, dtype, 0)


@pytest.mark.slow
@given(
    shape=st.sampled_from([(0, 0), (1, 1), (2, 2), (5, 5), (16, 16), (3, 5), (5, 3), (1, 4)]),
    batch=BATCHES,
    dtype=DTYPES,
    seed=SEEDS,
)
def test_lu_property(shape, batch, dtype, seed):
    check_lu(shape, batch, dtype, seed)


def check_lu_pivots_to_permutation(k, extra, batch, seed):
    size = k + extra
    rng = np.random.default_rng(seed)
    pivots = (np.arange(k) + rng.integers(0, size - np.arange(k), size=(*batch, k))).astype(
        np.int32
    )
    assert_exports_match_on(
        lambda p: lax.linalg.lu_pivots_to_permutation(p, size), pivots, jit=True
    )


@pytest.mark.parametrize(("k", "extra", "batch"), [(5, 2, (2,)), (0, 1, ())])
def test_lu_pivots_to_permutation_matches_jax(k, extra, batch):
    check_lu_pivots_to_permutation(k, extra, batch, 0)


def test_pivots_of_lu_are_its_permutation():
    """lu_factor / lu_solve turn lu's pivots back into a permutation: lu's own is taken (no
    swaps replayed), so the graph is no bigger than lu's; a symbolic batch too."""
    a = general(3, (2,), 5, shift=0.0)
    perm = lambda a: lax.linalg.lu_pivots_to_permutation(lax.linalg.lu(a)[1], 5)  # noqa: E731
    model = assert_exports_match_on(perm, a, jit=True)
    assert len(model.graph.node) <= len(
        assert_exports_match_on(lax.linalg.lu, a, jit=True).graph.node
    )
    assert_exports_match(perm, [("B", 5, 5)], input_values=[a], jit=True)
    assert_exports_match_on(
        lambda a: lax.linalg.lu_pivots_to_permutation(lax.linalg.lu(a)[1], 7), a, jit=True
    )


@pytest.mark.slow
@given(k=st.sampled_from([0, 1, 3, 5]), extra=st.integers(0, 2), batch=BATCHES, seed=SEEDS)
def test_lu_pivots_to_permutation_property(k, extra, batch, seed):
    check_lu_pivots_to_permutation(k, extra, batch, seed)


def check_qr(shape, batch, dtype, seed, full_matrices):
    """Q and R themselves, not only Q @ R: the reflectors are LAPACK's, so are R's signs."""
    a = general(seed, batch, *shape, dtype=dtype, shift=0.0)
    assert_exports_match_on(
        lambda a: lax.linalg.qr(a, full_matrices=full_matrices), a, **_tol(dtype), jit=True
    )


@pytest.mark.parametrize(
    ("shape", "batch", "dtype", "full_matrices"),
    [((5, 3), (2,), np.float32, True), ((3, 5), (), np.float64, False)],
)
def test_qr_matches_jax(shape, batch, dtype, full_matrices):
    check_qr(shape, batch, dtype, 0, full_matrices)


@pytest.mark.slow
@given(
    shape=st.sampled_from([(0, 0), (1, 1), (2, 2), (5, 5), (16, 16), (5, 3), (3, 5), (4, 1)]),
    batch=BATCHES,
    dtype=DTYPES,
    seed=SEEDS,
    full_matrices=st.booleans(),
)
def test_qr_property(shape, batch, dtype, seed, full_matrices):
    check_qr(shape, batch, dtype, seed, full_matrices)


@pytest.mark.parametrize(
    ("n", "dtype"), [(17, np.float64), pytest.param(40, np.float32, marks=pytest.mark.slow)]
)
def test_blocked_qr(n, dtype):
    """Above the unroll limit a square qr runs by blocks of columns (17: padded to 18; 40: to
    42): Gaussian matrices, a zero column (no reflection, as dlarfg), a symbolic batch."""
    assert n > steps.UNROLL_LIMIT
    a = general(6, (2,), n, dtype=dtype, shift=0.0)
    a[1, :, n // 3] = 0.0
    model = assert_exports_match_on(lax.linalg.qr, a, **_tol(dtype), jit=True)
    assert op_types(model).count("Scan") + op_types(model).count("Loop") == 1
    assert_exports_match(
        lax.linalg.qr,
        [("B", n, n)],
        input_values=[a],
        **_tol(dtype),
        enable_double_precision=dtype == np.float64,
        jit=True,
    )


def check_qr_pivoting(shape, batch, dtype, seed, full_matrices):
    """Column pivoting as geqp3: the permutation, Q and R themselves."""
    a = general(seed, batch, *shape, dtype=dtype, shift=0.0)
    assert_exports_match_on(
        lambda a: lax.linalg.qr(a, pivoting=True, full_matrices=full_matrices),
        a,
        **_tol(dtype),
        jit=True,
    )


@pytest.mark.parametrize(
    ("shape", "batch", "dtype", "full_matrices"),
    [
        ((5, 3), (2,), np.float32, False),
        ((3, 5), (), np.float64, True),
        ((9, 6), (2,), np.float64, True),  # above PIVOTED_UNROLL_LIMIT: the steps in a Loop
    ],
)
def test_qr_pivoting_matches_jax(shape, batch, dtype, full_matrices):
    check_qr_pivoting(shape, batch, dtype, 0, full_matrices)


def test_qr_pivoting_above_the_unroll_limit_is_one_loop():
    """A 16x16 pivoted QR was 1772 nodes unrolled; its pivoting steps run in one loop (an
    ONNX Scan; the reflectors' product stays unrolled), on a symbolic batch too."""
    a = general(2, (2,), 16, dtype=np.float32, shift=0.0)
    model = assert_exports_match(
        lambda a: jsl.qr(a, pivoting=True),
        [("B", 16, 16)],
        input_values=[a],
        **_tol(np.float32),
        jit=True,
    )
    assert (
        op_types(model).count("Loop") + op_types(model).count("Scan") == 1
        and len(model.graph.node) < 200
    ), op_types(model)


@pytest.mark.slow
@settings(max_examples=4)
@given(
    shape=st.sampled_from([(0, 3), (1, 1), (2, 2), (5, 5), (5, 3), (3, 5)]),
    batch=BATCHES,
    dtype=DTYPES,
    seed=SEEDS,
    full_matrices=st.booleans(),
)
def test_qr_pivoting_property(shape, batch, dtype, seed, full_matrices):
    check_qr_pivoting(shape, batch, dtype, seed, full_matrices)


def test_qr_pivoting_rank_deficient():
    """Nearly dependent columns: the downdated norms cancel and are recomputed as in LAPACK.
    Beyond the rank (3) Q's columns and R's rows are rounding noise; the rest is defined."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 2)) @ rng.normal(size=(2, 5))
    a = np.concatenate([a, 1e-9 * rng.normal(size=(6, 1))], axis=1)

    def defined(a):
        q, r, p = jsl.qr(a, pivoting=True)
        return q[:, :3], r[:3], p

    assert_exports_match_on(defined, a, rtol=1e-8, atol=1e-10, jit=True)
    assert_exports_match(
        lambda a: jsl.qr(a, pivoting=True, mode="economic"),
        [("B", 4, 3)],
        input_values=[general(1, (2,), 4, 3, shift=0.0)],
        jit=True,
    )


@pytest.mark.parametrize("mode", ["reduced", "complete", "r", "raw"])
@pytest.mark.parametrize("shape", [(5, 3)])
def test_jnp_qr_modes(mode, shape):
    a = general(3, (2,), *shape, shift=0.0)
    if mode == "raw":
        a = a[0]  # jnp.linalg.qr(mode="raw") takes no batch dims
    assert_exports_match_on(lambda a: jnp.linalg.qr(a, mode=mode), a, jit=True)


def test_householder_product_matches_jax():
    from jax._src.lax import linalg as lax_linalg

    a = general(4, (2,), 6, 4, shift=0.0)
    assert_exports_match_on(
        lambda a: lax_linalg.householder_product(*lax_linalg.geqrf(a)), a, jit=True
    )


def packed_qr(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """JAX's geqrf of ``a``: the reflectors packed below R, and their taus."""
    from jax._src.lax import linalg as lax_linalg

    with jax.enable_x64(a.dtype == np.float64):
        packed, taus = jax.jit(lax_linalg.geqrf)(a)
        return np.asarray(packed), np.asarray(taus)


def _ormqr_tol(dtype) -> dict:
    tol = 1e-12 if np.dtype(dtype) == np.float64 else 1e-5
    return {"rtol": tol, "atol": tol}


def check_ormqr(m, n, k, p, batch, dtype, seed, left, transpose):
    """ormqr on JAX's geqrf of a Gaussian ``a`` (m, n), its first k reflectors, applied to a
    Gaussian ``c`` (m, p) from the left or (p, m) from the right; a batch "B" is symbolic."""
    symbolic = batch == "B"
    batch = (3,) if symbolic else batch
    packed, taus = packed_qr(general(seed, batch, m, n, dtype=dtype, shift=0.0))
    taus = taus[..., :k]
    c = rhs(seed, batch, m, p, dtype)
    c = c if left else np.swapaxes(c, -1, -2)
    fn = lambda a, taus, c: lax.linalg.ormqr(  # noqa: E731
        a, taus, c, left=left, transpose=transpose
    )
    if not symbolic:
        return assert_exports_match_on(fn, packed, taus, c, **_ormqr_tol(dtype), jit=True)
    specs = [("B", m, n), ("B", k), ("B", *c.shape[-2:])]
    return assert_exports_match(
        fn,
        specs,
        input_values=[packed, taus, c],
        **_ormqr_tol(dtype),
        enable_double_precision=dtype == np.float64,
        jit=True,
    )


@pytest.mark.parametrize(
    ("m", "n", "k", "p", "batch", "dtype", "left", "transpose"),
    [
        (5, 4, 4, 3, (3,), np.float32, True, True),
        (4, 5, 4, 2, (), np.float64, True, False),
        (5, 5, 3, 2, "B", np.float32, False, True),
        (16, 16, 16, 5, (), np.float64, False, False),
    ],
)
def test_ormqr_matches_jax(m, n, k, p, batch, dtype, left, transpose):
    check_ormqr(m, n, k, p, batch, dtype, 0, left, transpose)


@pytest.mark.slow
@given(
    m=SIZES,
    n=SIZES,
    p=SIZES,
    batch=st.sampled_from([(), (3,), "B"]),
    dtype=DTYPES,
    seed=SEEDS,
    left=st.booleans(),
    transpose=st.booleans(),
    data=st.data(),
)
def test_ormqr_property(m, n, p, batch, dtype, seed, left, transpose, data):
    k = data.draw(
        st.sampled_from(sorted({s for s in (0, 1, 2, 5, 16) if s < min(m, n)} | {min(m, n)})),
        label="k",
    )
    check_ormqr(m, n, k, p, batch, dtype, seed, left, transpose)


def test_ormqr_above_the_unroll_limit_is_one_loop():
    """More reflectors than UNROLL_LIMIT, or a symbolic count, are one Loop (or Scan) over
    them: the graph does not grow with k."""
    k = steps.UNROLL_LIMIT + 4
    model = check_ormqr(k + 2, k, k, 3, (2,), np.float32, 1, True, False)
    assert (
        op_types(model).count("Loop") + op_types(model).count("Scan") == 1
        and len(model.graph.node) < 20
    ), op_types(model)
    packed, taus = packed_qr(general(2, (2,), 6, 4, shift=0.0))
    c = rhs(2, (2,), 3, 6)
    fn = lambda a, taus, c: lax.linalg.ormqr(a, taus, c, left=False, transpose=True)  # noqa: E731
    model = assert_exports_match(
        fn,
        [("B", "M", "K"), ("B", "K"), ("B", 3, "M")],
        input_values=[packed, taus, c],
        rtol=1e-5,
        atol=1e-5,
        jit=True,
    )
    assert op_types(model).count("Loop") + op_types(model).count("Scan") == 1, op_types(model)


def test_ormqr_under_vmap():
    packed, taus = packed_qr(general(3, (4,), 5, 3, shift=0.0))
    c = rhs(3, (4,), 5, 1)[..., 0]  # one vector per matrix
    apply = lambda a, taus, c: lax.linalg.ormqr(  # noqa: E731
        a, taus, c[:, None], transpose=True
    )[:, 0]
    assert_exports_match_on(jax.vmap(apply), packed, taus, c, jit=True)


@pytest.mark.parametrize(
    ("left", "transpose"), [(True, False), (True, True), (False, False), (False, True)]
)
def test_ormqr_spreads_nan_and_inf_as_jax(left, transpose):
    """As dlarf, H_j reads and writes only the lines j.. of c (rows from the left, columns from
    the right), none when tau_j is 0: a NaN or inf in c reaches the entries JAX's reaches and
    no more (an inf in a line the last reflectors do not touch stays an inf). An upper
    triangular matrix reflects nothing (every tau 0): c comes back as it was, infs included."""
    fn = jax.vmap(
        lambda a, taus, c: lax.linalg.ormqr(a, taus, c, left=left, transpose=transpose),
        in_axes=(None, None, 0),
    )
    c = rhs(4, (4,), 4, 3)  # 4 lines of 3
    c[0, 0, 0], c[1, 3, 2], c[2, 3, 1], c[3, 1, 2] = np.nan, np.nan, np.inf, -np.inf
    c = c if left else np.swapaxes(c, -1, -2)
    packed, taus = packed_qr(general(4, (), 4, 4, shift=0.0))
    expected = np.asarray(fn(packed, taus, c))
    assert 0 < np.isnan(expected).sum() < expected.size - 8
    assert np.isinf(expected).any() == (left == transpose)  # Q^T c and c Q: H_3 (tau 0) last
    assert_exports_match_on(fn, packed, taus, c, jit=True)
    packed, taus = packed_qr(np.triu(general(4, (), 4, 4, shift=0.0)))
    assert not taus.any()
    assert_exports_match_on(fn, packed, taus, c, jit=True)
    np.testing.assert_array_equal(np.asarray(fn(packed, taus, c)), c)


def test_ormqr_with_more_taus_than_reflectors_is_refused():
    """k > min(m, n): LAPACK refuses k > m, JAX's CPU ormqr reads past a for k > n."""
    from jax2onnx_nn import ConversionError, to_onnx

    with pytest.raises(
        ConversionError,
        match=r"ormqr at .*test_decompositions.py.* got 5 taus for a 5x4 matrix"
        r".*taus\[\.\.\., :4\]",
    ):
        to_onnx(lambda a, taus, c: lax.linalg.ormqr(a, taus, c), [(5, 4), (5,), (5, 2)])


def test_complex_ormqr_is_refused_as_complex_geqrf():
    """JAX's CPU has unmqr, but our geqrf and householder_product take real matrices only: a
    complex ormqr is reported as theirs are, by name, with the real form to use instead."""
    from jax2onnx_nn import ConversionError, to_onnx

    specs = [((5, 4), "complex64"), ((4,), "complex64"), ((5, 2), "complex64")]
    with pytest.raises(ConversionError, match=r"ormqr on complex numbers[\s\S]*ormqr of complex"):
        to_onnx(lambda a, taus, c: lax.linalg.ormqr(a, taus, c), specs)


@pytest.mark.parametrize(
    ("mode", "shape", "c_shape"),
    [("right", (5, 3), (2, 5)), ("left", (3, 5), (3, 2)), ("right", (4, 4), (4,))],
)
@pytest.mark.parametrize("conjugate", [False, True])
def test_qr_multiply_matches_jax(mode, shape, c_shape, conjugate):
    """jax.scipy.linalg.qr_multiply: geqrf, then ormqr on the side ``mode`` and ``conjugate``
    say."""
    a = general(5, (), *shape, shift=0.0)
    c = np.random.default_rng(5).normal(size=c_shape).astype(np.float32)
    qr_multiply = lambda a, c: jsl.qr_multiply(a, c, mode=mode, conjugate=conjugate)  # noqa: E731
    assert_exports_match_on(qr_multiply, a, c, jit=True)


@pytest.mark.parametrize(
    ("mode", "shape", "batch", "conjugate"),
    [("right", (5, 3), (), False), ("left", (3, 5), (2,), True), ("right", (9, 6), (2,), True)],
)
def test_qr_multiply_with_pivoting_matches_jax(mode, shape, batch, conjugate):
    """qr_multiply(pivoting=True): the geqp3 primitive (its jpvt all zero: every column free)
    as qr(pivoting=True)'s, then ormqr; 9x6 pivots in a Loop."""
    a = general(6, batch, *shape, shift=0.0)
    m, k = shape[0], min(shape)
    c = rhs(6, batch, 2, m) if mode == "right" else rhs(6, batch, k, 2)
    fn = lambda a, c: jsl.qr_multiply(  # noqa: E731
        a, c, mode=mode, conjugate=conjugate, pivoting=True
    )
    assert_exports_match_on(fn, a, c, jit=True)


def test_geqp3_primitive_matches_jax():
    """The primitive itself: LAPACK's 1-based permutation, on a symbolic batch; n = 0; a jpvt
    that is not a known zero (LAPACK's leading columns) is refused with what to pass."""
    from jax._src.lax import linalg as lax_linalg

    from jax2onnx_nn import ConversionError, to_onnx

    def geqp3(a):
        return lax_linalg.geqp3(a, jnp.zeros((*a.shape[:-2], a.shape[-1]), jnp.int32))

    a = general(7, (3,), 5, 4, shift=0.0)
    assert_exports_match(geqp3, [("B", 5, 4)], input_values=[a], jit=True)
    assert_exports_match_on(geqp3, np.zeros((3, 0), np.float32), jit=True)
    with pytest.raises(
        ConversionError, match=r"geqp3 at .*test_decompositions.py.* jpvt not known to be all zero"
    ):
        to_onnx(lambda a, jpvt: lax_linalg.geqp3(a, jpvt), [(5, 4), ((4,), "int32")])


def test_qr_of_columns_already_zero():
    """A zero column below the diagonal is no reflection (tau 0), as in dlarfg."""
    a = np.zeros((3, 3), np.float32)
    a[0, 0] = -2.0
    assert_exports_match_on(lax.linalg.qr, a, jit=True)
    assert_exports_match_on(lax.linalg.qr, np.zeros((2, 4, 3), np.float64), jit=True)


def _householder_reductions(a):
    """qr (reduced and pivoted), geqrf, geqp3 and, of a small square matrix, hessenberg (at 20x20
    JAX's blocked gehrd rounds ~1e-5 differently): every reduction whose reflectors' norms square
    the entries."""
    from jax._src.lax import linalg as lax_linalg

    jpvt = jnp.zeros((*a.shape[:-2], a.shape[-1]), jnp.int32)
    out = (
        *lax.linalg.qr(a, full_matrices=False),
        *jsl.qr(a, pivoting=True, mode="economic"),
        *lax_linalg.geqrf(a),
        *lax_linalg.geqp3(a, jpvt),
    )
    return (*out, *lax.linalg.hessenberg(a)) if a.shape[-1] == a.shape[-2] <= 16 else out


@functools.cache
def _householder_model(shape: tuple):
    return to_onnx(_householder_reductions, [shape])


@settings(max_examples=25, deadline=None)  # one export per shape, then a run per example
@given(
    shape=st.sampled_from([(4, 4), (2, 6, 3), (2, 20, 20)]), exponent=st.floats(-30, 30), seed=SEEDS
)
def test_float32_householder_of_entries_from_1e_minus_30_to_1e30(shape, exponent, seed):
    """The matrix is divided by a power of two before the reflections and R (H) multiplied
    back: entries of 1e20 gave inf and NaN (the norms' squares overflow float32) and of 1e-30
    wrong R (they underflow), where LAPACK's dnrm2 scales. Each output within 1e-5 of JAX's,
    relative to its largest entry; the pivots exactly."""
    a = (general(seed, shape[:-2], shape[-2], shape[-1]) * np.float32(10.0**exponent)).astype(
        np.float32
    )
    expected = [np.asarray(x) for x in jax.jit(_householder_reductions)(a)]
    actual = run_onnx(_householder_model(shape), [a])
    for got, want in zip(actual, expected, strict=True):
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(got, want)
        else:
            assert np.all(np.isfinite(got)), exponent
            assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), (
                exponent,
                np.abs(got - want).max(),
                np.abs(want).max(),
            )


# -- the functions users call ------------------------------------------------------------------
SOLVERS = {
    "solve": lambda a, b: jnp.linalg.solve(a, b),
    "inv": lambda a, b: jnp.linalg.inv(a),
    "det": lambda a, b: jnp.linalg.det(a),
    "slogdet": lambda a, b: jnp.linalg.slogdet(a),
    "cholesky": lambda a, b: jnp.linalg.cholesky(a),
    "cho_solve": lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b),
    "cho_solve_upper": lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=False), b),
    "lu_solve": lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b),
    "lu_solve_trans": lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b, trans=1),
    "lu": lambda a, b: jsl.lu(a),
    "solve_triangular": lambda a, b: jsl.solve_triangular(a, b, lower=True),
    "matrix_power": lambda a, b: jnp.linalg.matrix_power(a, -3),
    "multi_dot": lambda a, b: jnp.linalg.multi_dot([a, b, jnp.swapaxes(b, -1, -2), a]),
}


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize(
    ("n", "dtype"), [(2, np.float64), (3, np.float32), (5, np.float64), (16, np.float32)]
)
def test_lu_solve_applies_l_by_powers(n, dtype, trans):
    """lu_solve's solve with lu's unit L (or L^T) is (I - S)(I + S^2)(I + S^4)... (partial
    pivoting keeps L's entries at most 1): values as JAX on Gaussian matrices (rows swapped),
    and the only Split left is U's substitution."""
    a = general(n, (2,), n, dtype=dtype, shift=0.0)
    b = general(n + 1, (2,), n, 3, dtype=dtype, shift=0.0)
    model = assert_exports_match_on(
        lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b, trans=trans), a, b, **_tol(dtype), jit=True
    )
    assert op_types(model).count("Split") == 1, op_types(model)


def _each_once(names, cases):
    """Each name once by default, the cases taking turns; every other combination slow."""
    return [
        pytest.param(name, *case, marks=() if i % len(cases) == j else pytest.mark.slow)
        for i, name in enumerate(names)
        for j, case in enumerate(cases)
    ]


@pytest.mark.parametrize(
    ("name", "n", "batch", "dtype"),
    _each_once(SOLVERS, [(5, (2,), np.float32), (2, (), np.float64)]),
)
def test_linalg_functions_match_jax(name, n, batch, dtype):
    """Each function once per dtype (the primitives under them get the hypothesis draws);
    by default each once, in one of the two."""
    if name in ("multi_dot", "lu"):  # no batch dims in JAX either
        batch = ()
    a, b = spd(7, batch, n, dtype), rhs(7, batch, n, 2, dtype)
    assert_exports_match_on(SOLVERS[name], a, b, **_tol(dtype), jit=True)


@pytest.mark.parametrize(
    "name",
    [
        "solve",
        "cho_solve",
        pytest.param("inv", marks=pytest.mark.slow),
        pytest.param("slogdet", marks=pytest.mark.slow),
    ],
)
def test_symbolic_batch(name):
    """A symbolic batch dim ("B", 4, 4), the matrices drawn SPD for every B."""
    values = [spd(s, (b,), 4) for s, b in enumerate([1, 3])]
    for a in values:
        fn = SOLVERS[name]
        assert_exports_match(lambda a, fn=fn: fn(a, a), [("B", 4, 4)], input_values=[a], jit=True)


@pytest.mark.parametrize(
    "name", ["cholesky", "solve_triangular", "lu", pytest.param("solve", marks=pytest.mark.slow)]
)
def test_symbolic_size(name):
    """A symbolic matrix size ("B", "N", "N"): one Loop step per column."""
    a, b = spd(2, (2,), 5), rhs(2, (2,), 5, 2)
    fn = {
        "cholesky": lambda a, b: lax.linalg.cholesky(a, symmetrize_input=False),
        "solve_triangular": lambda a, b: jsl.solve_triangular(a, b, lower=False),
        "lu": lambda a, b: lax.linalg.lu(a),
        "solve": jnp.linalg.solve,
    }[name]
    assert_exports_match(
        fn, [("B", "N", "N"), ("B", "N", 2)], input_values=[a, b], rtol=1e-5, atol=1e-5, jit=True
    )


def test_under_vmap():
    a, b = spd(0, (3,), 4), rhs(0, (3,), 4, 1)[..., 0]
    assert_exports_match_on(jax.vmap(jnp.linalg.solve), a, b, jit=True)
    assert_exports_match_on(jax.vmap(jax.vmap(jnp.linalg.cholesky)), spd(1, (2, 3), 3), jit=True)


@pytest.mark.parametrize("n", [24, pytest.param(64, marks=pytest.mark.slow)])
def test_looped_sizes(n):
    """Above the unroll limit the steps are one ONNX Loop (or Scan): the graph grows with n
    only by the few nodes that place each block of columns (cholesky)."""
    assert n > steps.UNROLL_LIMIT
    a, b = spd(0, (2,), n), rhs(0, (2,), n, 3)
    model = assert_exports_match_on(
        lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b), a, b, rtol=1e-4, jit=True
    )
    loops = [op for op in op_types(model) if op in ("Loop", "Scan")]  # fori_loop: either
    assert len(loops) == 3 and len(model.graph.node) < 70
    assert_exports_match_on(jnp.linalg.inv, general(0, (2,), n), rtol=1e-4, atol=1e-4, jit=True)
    assert_exports_match_on(
        lax.linalg.lu, general(1, (), n, shift=0.0), rtol=1e-4, atol=1e-4, jit=True
    )


@pytest.mark.parametrize(("n", "dtype"), [(17, np.float64), (40, np.float32)])
def test_blocked_cholesky(n, dtype):
    """Above the unroll limit cholesky runs by blocks of columns (17: blocks of 9 padded to 18
    with I; 40: of 14 padded to 42): the factor, a pivot <= 0 in the last block (all NaN),
    a NaN entry (propagates), a symbolic batch."""
    assert n > steps.UNROLL_LIMIT
    a = spd(3, (2,), n, dtype) + np.triu(general(3, (2,), n, dtype=dtype), 1)
    cholesky = lambda a: lax.linalg.cholesky(a, symmetrize_input=False)  # noqa: E731
    model = assert_exports_match_on(cholesky, a, **_tol(dtype), jit=True)
    assert op_types(model).count("Scan") + op_types(model).count("Loop") == 1
    not_pd, with_nan = a.copy(), a.copy()
    not_pd[1, n - 1, n - 1] = -1.0
    with_nan[0, n - 2, 3] = np.nan
    assert_exports_match_on(cholesky, not_pd, **_tol(dtype), jit=True)
    assert_exports_match_on(cholesky, with_nan, **_tol(dtype), jit=True)
    if dtype == np.float32:
        assert_exports_match(
            cholesky, [("B", n, n)], input_values=[a], rtol=1e-5, atol=1e-5, jit=True
        )


# -- degenerate inputs -------------------------------------------------------------------------
DEGENERATE = {
    "not_pd": (lambda a: jnp.linalg.cholesky(a), np.array([[1.0, 2, 0], [2, 1, 0], [0, 0, 1]])),
    "nan_cholesky": (
        lambda a: lax.linalg.cholesky(a, symmetrize_input=False),
        np.array([[1.0, 0], [np.nan, 1]]),
    ),
    "singular_inv": (jnp.linalg.inv, np.ones((2, 2))),
    "singular_det": (jnp.linalg.det, np.ones((3, 3))),
    "singular_slogdet": (jnp.linalg.slogdet, np.ones((3, 3))),
    "zero_lu": (lax.linalg.lu, np.zeros((3, 3))),
    "rank1_lu": (lax.linalg.lu, np.ones((3, 3))),
    # a NaN / inf in the pivot row reaches every row below (no NaN in a pivot search: JAX's
    # CPU idamax then picks neither LAPACK's reference row nor ours)
    "nan_lu": (lax.linalg.lu, np.array([[1.0, 2, 3], [3, np.nan, 0], [2, 0, 1]])),
    "inf_lu": (lax.linalg.lu, np.array([[1.0, 2, 3], [3, 1, np.inf], [2, 0, 1]])),
    "nan_solve": (lambda a: jnp.linalg.solve(a, jnp.ones(2)), np.array([[1.0, np.nan], [2, 1]])),
    "zero_pivot_trsm": (
        lambda a: lax.linalg.triangular_solve(
            a, jnp.array([[0.0], [1]]), left_side=True, lower=True
        ),
        np.array([[0.0, 0], [1, 1]]),
    ),
    "size_0_inv": (jnp.linalg.inv, np.zeros((0, 0))),
    "size_0_batch": (jnp.linalg.cholesky, np.zeros((0, 3, 3))),
}


@pytest.mark.parametrize(("name", "dtype"), _each_once(DEGENERATE, [(np.float32,), (np.float64,)]))
def test_degenerate_inputs_as_jax(name, dtype):
    fn, a = DEGENERATE[name]
    assert_exports_match_on(fn, a.astype(dtype), jit=True)


# the primitive JAX's CPU refuses in half precision, and calls of users that reach it
HALF_PRECISION_REFUSED = [
    ("lu", lambda a: lax.linalg.lu(a)),
    ("lu", jnp.linalg.inv),
    ("lu", lambda a: jnp.linalg.solve(a, a[:, :1])),
    ("lu", jnp.linalg.det),
    ("cholesky", jnp.linalg.cholesky),
    ("cholesky", lambda a: jsl.cho_factor(a)[0]),
    ("qr", jnp.linalg.qr),
    ("householder_product", lambda a: lax.linalg.householder_product(a, a[0])),
    ("ormqr", lambda a: lax.linalg.ormqr(a, a[0], a)),
    ("geqp3", lambda a: jsl.qr_multiply(a, a, pivoting=True)),
    ("svd", jnp.linalg.svd),
    ("svd", jnp.linalg.svdvals),
    ("svd", jnp.linalg.pinv),
    ("eigh", jnp.linalg.eigh),
    ("eigh", jnp.linalg.eigvalsh),
    ("hessenberg", jsl.hessenberg),
    ("tridiagonal", lambda a: lax.linalg.tridiagonal(a)),
    ("schur", jsl.schur),
    (
        "eig",
        lambda a: lax.linalg.eig(
            a, compute_left_eigenvectors=False, compute_right_eigenvectors=False
        ),
    ),
    ("tridiagonal_solve", lambda a: lax.linalg.tridiagonal_solve(a[0], a[1], a[2], a[:, :1])),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("name", "fn"),
    HALF_PRECISION_REFUSED,
    ids=[f"{name}-{i}" for i, (name, _) in enumerate(HALF_PRECISION_REFUSED)],
)
def test_half_precision_factorization_is_refused_with_the_fix(name, fn, dtype):
    """JAX's CPU lu, cholesky, qr, svd, eigh, eig, hessenberg, tridiagonal, schur and
    tridiagonal_solve (LAPACK) refuse float16 / bfloat16 ("Unsupported dtype"); the export names the
    primitive, the dtype, the user's line and the cast that fixes it. (JAX 0.12 refuses the dtype
    while tracing already: then it is the SpecError of a call JAX rejects, naming the primitive, the
    dtype and the user's line.)"""
    from jax2onnx_nn import ConversionError, to_onnx
    from jax2onnx_nn.core.errors import SpecError

    with pytest.raises((ConversionError, SpecError)) as raised:
        to_onnx(lambda a: fn(a), [((4, 4), dtype)])
    message = str(raised.value)
    assert "test_decompositions.py" in message, message
    if isinstance(raised.value, SpecError):
        assert f"{name} does not accept dtype {dtype}" in message, message
        return
    assert f"{name} of a {dtype} matrix at " in message, message
    assert "a.astype(jnp.float32)" in message and f".astype(jnp.{dtype})" in message, message


# float32 matrices in a model exported with enable_double_precision=True (x64 on while the
# algorithms are traced): every result stays float32, as JAX's do
FLOAT32_UNDER_X64 = {
    "lu": lambda a: lax.linalg.lu(a),
    "det": jnp.linalg.det,
    "inv": jnp.linalg.inv,
    "solve": lambda a: jnp.linalg.solve(a, a[:, :2]),
    "cholesky": lambda a: jnp.linalg.cholesky(
        a @ a.T + a.shape[0] * jnp.eye(a.shape[0], dtype=a.dtype)
    ),
    "qr": jnp.linalg.qr,
    "eigh": lambda a: jnp.linalg.eigvalsh(a + a.T),
    "svdvals": jnp.linalg.svdvals,
    "eigvals": lambda a: (
        jnp.sort(jnp.linalg.eigvals(a).real),
        jnp.sort(jnp.abs(jnp.linalg.eigvals(a).imag)),
    ),
    "expm": lambda a: jsl.expm(0.1 * a),
}


@pytest.mark.parametrize("n", [3, 20])
@pytest.mark.parametrize("name", FLOAT32_UNDER_X64)
def test_float32_matrices_with_double_precision_enabled(name, n):
    """lu's masks once took a Python scalar's dtype (float64 with x64 on) and widened the
    float32 matrix: an internal error at export (5x5), a failed trace (20x20)."""
    a = general(n, (), n)
    tol = {"rtol": 1e-4, "atol": 1e-4} if n == 20 else {"rtol": 1e-5, "atol": 1e-5}
    assert_exports_match_on(
        FLOAT32_UNDER_X64[name], a, enable_double_precision=True, jit=True, **tol
    )


# -- graph size --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fn", "limit"),
    [
        (lambda a: lax.linalg.cholesky(a, symmetrize_input=False), 30),  # 8 of them JAX's tril
        (lambda a: lax.linalg.triangular_solve(a, a, left_side=True, lower=True), 17),
        (
            lambda a: lax.linalg.triangular_solve(a, a, left_side=True, lower=False),
            17,
        ),  # no reversals
        (lambda a: jsl.cho_solve((a, True), a[..., :1]), 33),  # the two solves share a's diagonal
        (lambda a: lax.linalg.lu(a), 68),  # the last step's rows two GatherNDs, the pivots one Cast
        (
            lambda a: jnp.linalg.solve(a, a[..., :1]),
            60,
        ),  # one elimination on [a | b] (test_solves.py)
        (lambda a: jnp.linalg.inv(a), 59),  # its identity folded (an exact Cast of a mask)
        (
            lambda a: jsl.lu_solve(jsl.lu_factor(a), a[..., :1]),
            92,
        ),  # lu's permutation, not its pivots replayed
        (lambda a: jnp.linalg.det(a), 92),
        (lambda a: jnp.linalg.slogdet(a), 90),  # the sign's parity is one Mod (value ranges)
        (lambda a: lax.linalg.qr(a), 140),  # 17 of them the power-of-two scale (entries of 1e20)
    ],
)
def test_small_graphs(fn, limit):
    """A 4x4 factorization is a few dozen nodes."""
    model = assert_exports_match_on(fn, spd(0, (), 4), jit=True)
    assert len(model.graph.node) <= limit, [n.op_type for n in model.graph.node]
