"""svd and eigh (parallel-order Jacobi) and the jnp.linalg functions built on svd: onnxruntime
vs JAX on hypothesis-drawn shapes (1xN, Nx1, size 0, batch dims, symbolic "B"), float32 and
float64, random Gaussian and rank-deficient matrices, and graph sizes.

Singular vectors' signs are free (JAX documents none), so ``_svd_canonical`` compares what is
defined: the values, each pair (u_k, v_k) with its sign fixed, the reconstruction and the
orthogonality; for ``full_matrices`` the extra columns of U (or rows of Vh) are any basis of the
complement, so their projector is compared.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core.lowerings import svd as svd_module
from jax2onnx_nn.core.lowerings.lapack import steps
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on
from jax2onnx_nn.testing.assertions import op_types

SHAPES = st.sampled_from(
    [(0, 0), (0, 3), (3, 0), (1, 1), (1, 4), (4, 1), (2, 2), (3, 5), (5, 3), (6, 6), (7, 7)]
)
BATCHES = st.sampled_from([(), (2,), (1, 3)])
DTYPES = st.sampled_from([np.float32, np.float64])
SEEDS = st.integers(0, 2**16)


def _tol(dtype) -> dict:
    """float32 vectors to 1e-4: their accuracy is relative to the singular value gaps."""
    return (
        {"rtol": 1e-10, "atol": 1e-10}
        if np.dtype(dtype) == np.float64
        else {"rtol": 1e-4, "atol": 1e-4}
    )


def gaussian(seed: int, shape: tuple, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def low_rank(seed: int, shape: tuple, rank: int, dtype=np.float32) -> np.ndarray:
    """A (..., m, n) matrix of the given rank (exact zeros beyond it, up to rounding)."""
    rng = np.random.default_rng(seed)
    left = rng.normal(size=(*shape[:-1], rank))
    right = rng.normal(size=(*shape[:-2], rank, shape[-1]))
    return (left @ right).astype(dtype)


def _svd_canonical(a, full_matrices=True):
    u, s, vh = lax.linalg.svd(a, full_matrices=full_matrices, compute_uv=True)
    k = s.shape[-1]
    if k == 0:
        return s, u, vh
    uk, vk = u[..., :, :k], vh[..., :k, :]
    at = jnp.argmax(jnp.abs(uk), axis=-2, keepdims=True)
    sign = jnp.sign(jnp.take_along_axis(uk, at, axis=-2))
    rec = (uk * s[..., None, :]) @ vk
    ortho_u = jnp.swapaxes(u, -1, -2) @ u
    ortho_v = vh @ jnp.swapaxes(vh, -1, -2)
    rest_u = u[..., :, k:] @ jnp.swapaxes(u[..., :, k:], -1, -2)  # the complement's projector
    rest_v = jnp.swapaxes(vh[..., k:, :], -1, -2) @ vh[..., k:, :]
    return s, uk * sign, vk * jnp.swapaxes(sign, -1, -2), rec, ortho_u, ortho_v, rest_u, rest_v


# -- the primitive ------------------------------------------------------------------------------
# Each property runs a few representative cases by default (both dtypes, a batched and a wide
# and a tall matrix) and its hypothesis draws with --run-slow (each SVD export takes ~1 s).
def check_svd(shape, batch, dtype, seed, full_matrices):
    a = gaussian(seed, (*batch, *shape), dtype)
    assert_exports_match_on(lambda a: _svd_canonical(a, full_matrices), a, **_tol(dtype), jit=True)


@pytest.mark.parametrize(
    ("shape", "batch", "dtype", "full_matrices"),
    [((3, 5), (2,), np.float32, True), ((5, 3), (), np.float64, False)],
)
def test_svd_matches_jax(shape, batch, dtype, full_matrices):
    check_svd(shape, batch, dtype, 0, full_matrices)


@pytest.mark.slow
@settings(max_examples=3)  # each example exports U and V (~3 s)
@given(shape=SHAPES, batch=BATCHES, dtype=DTYPES, seed=SEEDS, full_matrices=st.booleans())
def test_svd_property(shape, batch, dtype, seed, full_matrices):
    check_svd(shape, batch, dtype, seed, full_matrices)


def check_singular_values(shape, batch, dtype, seed):
    """Values only (compute_uv=False): no V is carried, no U is formed; 1e-5 in float32."""
    a = gaussian(seed, (*batch, *shape), dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else _tol(dtype)
    assert_exports_match_on(lambda a: lax.linalg.svd(a, compute_uv=False), a, **tol, jit=True)


@pytest.mark.parametrize(
    ("shape", "batch", "dtype"),
    [((6, 6), (2,), np.float32), ((1, 4), (), np.float64), ((0, 3), (), np.float32)],
)
def test_singular_values_match_jax(shape, batch, dtype):
    check_singular_values(shape, batch, dtype, 1)


@pytest.mark.slow
@given(shape=SHAPES, batch=BATCHES, dtype=DTYPES, seed=SEEDS)
def test_singular_values_property(shape, batch, dtype, seed):
    check_singular_values(shape, batch, dtype, seed)


def test_svd_of_ill_conditioned_matrix():
    """Singular values spread over 12 decades come out as LAPACK's, to float64 rounding of
    the largest (one-sided Jacobi never forms a^T a, whose eigenvalues would leave the small
    ones at ~1e-8)."""
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    v, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    a = (u * np.logspace(0, -12, 12)) @ v.T
    model = to_onnx(
        lambda a: lax.linalg.svd(a, compute_uv=False), [a], enable_double_precision=True
    )
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (ours,) = session.run(None, {session.get_inputs()[0].name: a})
    np.testing.assert_allclose(ours, np.linalg.svd(a, compute_uv=False), rtol=1e-10, atol=1e-15)


def test_symbolic_batch_and_vmap():
    """svd and eigh with a symbolic batch dim ("B", 4, 3) in one model, and under jax.vmap."""
    both = lambda a: (*_svd_canonical(a), jnp.linalg.eigvalsh(jnp.swapaxes(a, -1, -2) @ a))  # noqa: E731
    assert_exports_match(both, [("B", 4, 3)], sizes={"B": [3]}, **_tol(np.float32), jit=True)
    a = gaussian(2, (3, 4, 4))
    values = jax.vmap(lambda a: (jnp.linalg.svdvals(a), jnp.linalg.eigvalsh(a + a.T)))
    assert_exports_match_on(values, a, rtol=1e-5, atol=1e-5, jit=True)


def _loop_state_types(model) -> set:
    return {
        i.type.tensor_type.elem_type
        for node in model.graph.node
        if node.op_type == "Loop"
        for i in node.attribute[0].g.input
    }


@pytest.mark.parametrize(
    "shape", [(3, 20, 20), (3, 40, 8), (3, 8, 40)], ids=["square", "tall", "wide"]
)
def test_float32_svd_is_rotated_in_float32(shape):
    """A float32 svd of a static size rotates in float32 (the Loops' states, the rotated
    matrices, hold no float64): a short side up to WIDEN_ABOVE as the square one (a column
    meets as few rotations), a larger one with its values from U and V; svdvals takes its
    values from the rotated columns' directions. On a Gaussian matrix, one of rank 3 and one
    whose values span 6 decades, the values, U s Vh and U^T U, Vh Vh^T are float64 LAPACK's
    to 2e-6 of the largest value, svdvals' values to 5e-7."""
    m, n = shape[-2:]
    k = min(m, n)
    rng = np.random.default_rng(0)
    q1, _ = np.linalg.qr(rng.normal(size=(m, k)))
    q2, _ = np.linalg.qr(rng.normal(size=(n, k)))
    a = np.stack(
        [
            gaussian(1, (m, n), np.float64),
            low_rank(2, (m, n), 3, np.float64),
            (q1 * np.logspace(0, -6, k)) @ q2.T,
        ]
    ).astype(np.float32)
    model = to_onnx(lambda a: (*jnp.linalg.svd(a, full_matrices=False), jnp.linalg.svdvals(a)), [a])
    assert onnx.TensorProto.DOUBLE not in _loop_state_types(model)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    u, s, vh, values = session.run(None, {session.get_inputs()[0].name: a})
    reference = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    big = reference[..., :1]
    eye = np.eye(k)
    np.testing.assert_allclose(s / big, reference / big, rtol=0, atol=2e-6)
    np.testing.assert_allclose(values / big, reference / big, rtol=0, atol=5e-7)
    np.testing.assert_allclose(
        (u * s[..., None, :]) @ vh / big[..., None], a / big[..., None], rtol=0, atol=2e-6
    )
    np.testing.assert_allclose(
        np.swapaxes(u, -1, -2) @ u, np.broadcast_to(eye, (3, k, k)), rtol=0, atol=2e-6
    )
    np.testing.assert_allclose(
        vh @ np.swapaxes(vh, -1, -2), np.broadcast_to(eye, (3, k, k)), rtol=0, atol=2e-6
    )


def test_large_float32_singular_values_of_degenerate_and_scaled_matrices():
    """Above WIDEN_ABOVE, float32 values from the rotated columns' directions: a NaN or an inf
    entry makes all values NaN as in JAX, the zero matrix has zero values, and entries of
    1e-30 or 1e30 (whose squares leave float32's range) give JAX's values to 1e-6 of the largest."""
    n = svd_module.WIDEN_ABOVE + 4
    a = gaussian(0, (5, n, n))
    a[0, 1, 1], a[1, 2, 3], a[2] = np.nan, np.inf, 0
    a[3] *= 1e-30
    a[4] *= 1e30
    model = to_onnx(jnp.linalg.svdvals, [a])
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (ours,) = session.run(None, {session.get_inputs()[0].name: a})
    expected = np.asarray(jnp.linalg.svdvals(a))
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    assert np.isnan(ours[:2]).all() and (ours[2] == 0).all()
    big = expected[3:, :1]
    np.testing.assert_allclose(ours[3:] / big, expected[3:] / big, rtol=0, atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 3), (8, 8), (17, 17), (64, 8), (8, 64)])
def test_float32_singular_values_far_below_the_largest(shape):
    """float32 svdvals (values from the rotated columns' directions): a value far below the
    largest (rank 1 of ones, columns scaled 1e-20..1e20, values 1 .. 1e-6) is LAPACK's to 2e-6
    of the largest, where the direction of its column is mostly rounding (|a^T b_k| / |b_k|
    alone gave 17 for the second value of the 17x17 ones, 10-50% errors for the scaled columns)."""
    m, n = shape
    rng = np.random.default_rng(7)
    q1, _ = np.linalg.qr(rng.normal(size=(m, min(m, n))))
    q2, _ = np.linalg.qr(rng.normal(size=(n, min(m, n))))
    scaled = rng.normal(size=shape) * np.logspace(-20, 20, n)[None, :] * 1e-20
    a = np.stack([np.ones(shape), scaled, (q1 * np.logspace(0, -6, min(m, n))) @ q2.T]).astype(
        np.float32
    )
    model = to_onnx(jnp.linalg.svdvals, [a])
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (values,) = session.run(None, {session.get_inputs()[0].name: a})
    reference = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    big = reference[..., :1]
    np.testing.assert_allclose(values / big, reference / big, rtol=0, atol=2e-6)


@pytest.mark.parametrize("shape", [(8, 8), (17, 17), (64, 8), (8, 64)])
def test_float32_svd_of_columns_scaled_1e_minus_20_to_1e20_is_orthonormal(shape):
    """Values 1e-22 of the largest and below: their columns' squares are under float32's range;
    U and V are still orthonormal to 1e-6 (U^T U was 0.15 off at 8x8, 0.013 at 64x8), the
    values and U s Vh float64 LAPACK's to 2e-6 of the largest. (JAX's own float32 gesdd, which
    the 17x17 export follows: U^T U 8.3e-7 from I; the export 1.1e-6.)"""
    m, n = shape
    rng = np.random.default_rng(0)
    a = np.stack(
        [
            rng.normal(size=shape) * np.logspace(-20, 20, n)[None, :] * 1e-20,
            rng.normal(size=shape) * np.logspace(-20, 20, m)[:, None] * 1e-20,
        ]
    ).astype(np.float32)
    model = to_onnx(lambda a: jnp.linalg.svd(a, full_matrices=False), [a])
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    u, s, vh = session.run(None, {session.get_inputs()[0].name: a})
    k = min(m, n)
    eye = np.broadcast_to(np.eye(k), (2, k, k))
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, eye, rtol=0, atol=1.5e-6)
    np.testing.assert_allclose(vh @ np.swapaxes(vh, -1, -2), eye, rtol=0, atol=1.5e-6)
    reference = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    big = reference[..., :1]
    np.testing.assert_allclose(s / big, reference / big, rtol=0, atol=2e-6)
    np.testing.assert_allclose(
        (u * s[..., None, :]) @ vh / big[..., None], a / big[..., None], rtol=0, atol=2e-6
    )


def test_large_float32_eigh_is_rotated_in_float32_and_refined():
    """Above WIDEN_ABOVE a float32 eigh rotates in float32, then again on V^T a V (eigh's
    refine): on a Gaussian matrix, two clusters of eigenvalues 1e-6 apart, repeated ones, the
    zero matrix and a diagonal one, the values, V w V^T and V^T V are LAPACK's to 3e-6 of
    max |a|, with no float64 in the graph."""
    n = svd_module.WIDEN_ABOVE + 4
    rng = np.random.default_rng(5)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    spectra = [
        np.repeat([1.0, -1.0], n // 2) + 1e-6 * rng.normal(size=n),
        np.repeat([1.0, 2.0, 3.0, 4.0], n // 4),
    ]
    m = gaussian(6, (n, n), np.float64)
    cases = np.stack(
        [
            m + m.T,
            *((q * lam) @ q.T for lam in spectra),
            np.zeros((n, n)),
            np.diag(np.arange(n) - 3.0),
        ]
    )
    cases = ((cases + np.swapaxes(cases, -1, -2)) / 2).astype(np.float32)
    model = assert_exports_match_on(_eigh_defined, cases, rtol=3e-6, atol=3e-6, jit=True)
    assert onnx.TensorProto.DOUBLE not in _loop_state_types(model)


@functools.cache
def _eigh_session(n: int) -> onnxruntime.InferenceSession:
    model = to_onnx(lambda a: lax.linalg.eigh(a), [((2, n, n), "float32")])
    return onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )


@settings(max_examples=10, deadline=None)  # one export per size, then a run per example
@given(n=st.sampled_from([3, 8, svd_module.WIDEN_ABOVE]), gap=st.floats(1e-4, 1e-2), seed=SEEDS)
def test_small_float32_eigh_vectors_of_close_eigenvalues(n, gap, seed):
    """Up to syevd.STEQR_LIMIT a float32 eigh is syevd's own float32 path (sytrd, steqr,
    ormtr): the vectors of two eigenvalues ``gap`` (relative to |a|) apart are within
    float32's perturbation bound (eps / gap) of float64 LAPACK's, as JAX's float32 syevd's
    are (their signs, and which of them is nearer, hinge on rounding: docs/linear-algebra.md).
    The bound is each vector's own: another pair of the random values may lie closer than
    ``gap`` (n=16, gap 2^-7, seed 583 drew two 1.6e-5 apart: error 7e-4, within 10 eps over
    that gap)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    lam = np.sort(rng.uniform(-1, 1, size=n))
    lam[1] = lam[0] + gap * np.abs(lam).max()
    a = (q * lam) @ q.T
    a = np.stack([a + a.T, -(a + a.T)]).astype(np.float32) / 2
    sess = _eigh_session(n)
    v, w = sess.run(None, {sess.get_inputs()[0].name: a})
    w64, v64 = np.linalg.eigh(a.astype(np.float64))
    v = v * np.sign(np.sum(v * v64, axis=-2, keepdims=True))
    apart = np.abs(w64[..., :, None] - w64[..., None, :]) + np.where(np.eye(n), np.inf, 0)
    gaps = np.min(apart, axis=-1) / np.max(np.abs(w64), axis=-1, keepdims=True)  # per vector
    assert np.all(np.max(np.abs(v - v64), axis=-2) < 10 * float(np.finfo(np.float32).eps) / gaps)
    assert np.abs(w - w64).max() < 1e-6 * np.abs(w64).max()


def test_svd_propagates_nan():
    a = gaussian(0, (2, 3, 3))
    a[0, 1, 1] = np.nan
    assert_exports_match_on(lambda a: lax.linalg.svd(a, compute_uv=False), a, jit=True)


@functools.cache
def _session_of_svd_and_eigh(shape: tuple) -> onnxruntime.InferenceSession:
    """svd of (..., m, n) and eigh of (..., n, n) in one float32 model, exported once per shape:
    the magnitudes below are run-time values."""
    sym = (*shape[:-2], shape[-1], shape[-1])
    model = to_onnx(
        lambda a, b: (*lax.linalg.svd(a, full_matrices=False), *lax.linalg.eigh(b)), [shape, sym]
    )
    return onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )


@settings(max_examples=25, deadline=None)  # one export per shape, then a run per example
@given(shape=st.sampled_from([(3, 3), (2, 5, 3), (2, 4)]), exponent=st.floats(-30, 30), seed=SEEDS)
def test_float32_magnitudes_from_1e_30_to_1e30(shape, exponent, seed):
    """float32 entries whose squares leave float32's range (1e20: 1e40; 1e-30: 1e-60) give
    values, reconstructions and orthogonality to ~1e-6 of their scale, as LAPACK's (the
    matrix is divided by a power of two first, exactly; jnp.linalg.svd's own LAPACK scales
    too); float64 LAPACK is the reference."""
    a = (gaussian(seed, shape, np.float64) * 10.0**exponent).astype(np.float32)
    m = np.random.default_rng(seed).normal(size=(*shape[:-2], shape[-1], shape[-1]))
    sym = ((m + np.swapaxes(m, -1, -2)) * 10.0**exponent).astype(np.float32)
    session = _session_of_svd_and_eigh(shape)
    u, s, vh, v, w = session.run(
        None, dict(zip([i.name for i in session.get_inputs()], [a, sym], strict=True))
    )
    a64, sym64 = a.astype(np.float64), sym.astype(np.float64)
    big = np.max(np.abs(a64), axis=(-2, -1), keepdims=True)
    eye = np.broadcast_to(np.eye(s.shape[-1]), (*shape[:-2], s.shape[-1], s.shape[-1]))
    np.testing.assert_allclose(
        s / big[..., 0], np.linalg.svd(a64, compute_uv=False) / big[..., 0], rtol=0, atol=2e-6
    )
    np.testing.assert_allclose(((u * s[..., None, :]) @ vh) / big, a64 / big, rtol=0, atol=2e-6)
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, eye, rtol=0, atol=2e-6)
    np.testing.assert_allclose(vh @ np.swapaxes(vh, -1, -2), eye, rtol=0, atol=2e-6)
    big = np.max(np.abs(sym64), axis=(-2, -1), keepdims=True)
    np.testing.assert_allclose(
        w / big[..., 0], np.linalg.eigvalsh(sym64) / big[..., 0], rtol=0, atol=2e-6
    )
    np.testing.assert_allclose(
        ((v * w[..., None, :]) @ np.swapaxes(v, -1, -2)) / big, sym64 / big, rtol=0, atol=2e-6
    )


def test_svd_of_inf_and_nan_is_nan_as_jax():
    """A matrix with an inf or NaN entry has NaN singular values, as JAX's; its vectors are all
    NaN (JAX's LAPACK leaves a few entries finite: a non-finite matrix has no decomposition)."""
    a = gaussian(0, (3, 3, 3))
    a[0, 1, 1], a[1, 0, 2] = np.nan, np.inf
    session = _session_of_svd_and_eigh((3, 3, 3))
    u, s, vh, _, _ = session.run(
        None,
        dict(
            zip(
                [i.name for i in session.get_inputs()], [a, a + np.swapaxes(a, -1, -2)], strict=True
            )
        ),
    )
    np.testing.assert_array_equal(
        np.isnan(s), np.isnan(np.asarray(jnp.linalg.svd(a, compute_uv=False)))
    )
    assert (
        np.isnan(u[:2]).all()
        and np.isnan(vh[:2]).all()
        and np.isfinite(u[2]).all()
        and np.isfinite(vh[2]).all()
    )


@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
def test_svd_of_symbolic_matrix_size(dtype):
    """("N", "N"): the rounds are a Loop over the size, the pairs reseated by one Gather, an
    odd N padded by one zero column; float32 is rotated in float64 (N may be large)."""
    fn = lambda a: _svd_canonical(a, full_matrices=dtype == np.float32)  # noqa: E731
    assert_exports_match(
        fn,
        [(("N", "N"), dtype)],
        sizes={"N": [1, 4, 5]},
        enable_double_precision=dtype == np.float64,
        **_tol(dtype),
        jit=True,
    )


def test_svd_of_symbolic_rectangle():
    """("N", 1) is provably tall: its columns are rotated, with vectors too (U's QR asked
    min(N, 1), inconclusive, before jxi.min_dim); ("N", 4) is not provably either."""
    assert_exports_match(jnp.linalg.svdvals, [("N", 1)], sizes={"N": [1, 3]}, jit=True)
    for full in (True, False):
        fn = lambda a, full=full: _svd_canonical(a, full_matrices=full)  # noqa: E731
        assert_exports_match(fn, [("N", 1)], sizes={"N": [1, 3, 7]}, **_tol(np.float32), jit=True)
    with pytest.raises(
        ConversionError, match=r"\(N, 4\) matrix at .*test_svd.py.*N >= 4.*static size"
    ):
        to_onnx(lambda a: lax.linalg.svd(a), [("N", 4)])
    # through jnp.linalg.svd (a jitted library function): still the user's line, not JAX's
    with pytest.raises(ConversionError, match=r"\(N, 4\) matrix at .*test_svd.py:\d+"):
        to_onnx(lambda a: jnp.linalg.svd(a), [("N", 4)])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((2, 32, 32), np.float32),
        ((64, 64), np.float32),
        ((40, 24), np.float64),
        ((64, 64), np.float64),
    ],
)
def test_svd_large(shape, dtype):
    assert_exports_match_on(
        _svd_canonical, gaussian(len(shape), shape, dtype), **_tol(dtype), jit=True
    )


# -- the functions users call -------------------------------------------------------------------
def _on_singular_values(a):
    """svdvals, norm(ord=2, -2, "nuc") and cond: one model (the SVD is traced once)."""
    norms = [jnp.linalg.norm(a, ord=o, axis=(-2, -1)) for o in (2, -2, "nuc")]
    return jnp.linalg.svdvals(a), *norms, jnp.linalg.cond(a)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((2, 5, 5), np.float32), pytest.param((4, 4), np.float64, marks=pytest.mark.slow)],
)
def test_functions_on_singular_values_match_jax(shape, dtype):
    a = gaussian(7, shape, dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else _tol(dtype)
    assert_exports_match_on(_on_singular_values, a, **tol, jit=True)


def _other_norms(a):
    """The norms that need no singular values: every other ord, matrix and vector."""
    matrix = [
        jnp.linalg.norm(a, ord=o, axis=(-2, -1)) for o in (None, "fro", 1, -1, jnp.inf, -jnp.inf)
    ]
    vector = [jnp.linalg.norm(a, ord=o, axis=-1) for o in (None, 0, 1, 3, -1, jnp.inf, -jnp.inf)]
    return *matrix, *vector


@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
def test_other_norms_match_jax(dtype):
    a = gaussian(5, (2, 4, 4), dtype) + 4 * np.eye(4, dtype=dtype)
    assert_exports_match_on(
        _other_norms,
        a,
        **({"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else _tol(dtype)),
        jit=True,
    )


def check_rank_deficient(shape, rank, batch, dtype, seed):
    """Zero singular values still give orthonormal U and V (QR completes the basis);
    matrix_rank exactly; pinv and lstsq (solution, residuals, rank, values) to rounding."""
    a = low_rank(seed, (*batch, *shape), rank, dtype)
    b = gaussian(seed + 1, (shape[0], 2), dtype)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-9, "atol": 1e-9}

    def defined(a, b):
        u, s, vh = jnp.linalg.svd(a)
        svd = (
            s,
            (u[..., :, :rank] * s[..., None, :rank]) @ vh[..., :rank, :],
            jnp.swapaxes(u, -1, -2) @ u,
            vh @ jnp.swapaxes(vh, -1, -2),
        )
        lstsq = jnp.linalg.lstsq(a, b) if not batch else ()  # lstsq takes no batch dims
        return *svd, jnp.linalg.matrix_rank(a), jnp.linalg.pinv(a), *lstsq

    assert_exports_match_on(defined, a, b, **tol, jit=True)


def test_rank_deficient_matrices():
    check_rank_deficient((6, 3), 2, (), np.float64, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_v_from_u_above_the_unroll_limit(dtype):
    """Above UNROLL_LIMIT columns V is a^T U / s orthonormalized: on a Gaussian matrix, one of
    rank 5 (15 zero singular values: V completed) and one whose values span 12 decades (V of
    the small ones from a division by them), values, reconstruction and orthogonality are
    LAPACK's to rounding, and a tall matrix's full U too. float32 is rotated in float32 (its
    values from U and V), no float64 in the graph."""
    n = steps.UNROLL_LIMIT + 4
    rng = np.random.default_rng(0)
    q1, _ = np.linalg.qr(rng.normal(size=(n, n)))
    q2, _ = np.linalg.qr(rng.normal(size=(n, n)))
    cases = np.stack(
        [
            gaussian(1, (n, n), np.float64),
            low_rank(2, (n, n), 5, np.float64),
            (q1 * np.logspace(0, -12, n)) @ q2.T,
        ]
    ).astype(dtype)

    def defined(a):
        u, s, vh = jnp.linalg.svd(a)
        big = jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True)
        return (
            s / big[..., 0],
            (u * s[..., None, :]) @ vh / big,
            jnp.swapaxes(u, -1, -2) @ u,
            vh @ jnp.swapaxes(vh, -1, -2),
        )

    tol = 1e-12 if dtype == np.float64 else 3e-6
    model = assert_exports_match_on(defined, cases, rtol=tol, atol=tol, jit=True)
    assert (onnx.TensorProto.DOUBLE in _loop_state_types(model)) == (dtype == np.float64)
    assert_exports_match_on(_svd_canonical, gaussian(3, (n + 4, n), dtype), **_tol(dtype), jit=True)


@pytest.mark.slow
@settings(max_examples=2)  # each example exports four SVDs (~8 s)
@given(
    shape=st.sampled_from([(5, 5), (6, 3), (3, 6)]),
    rank=st.integers(0, 3),
    batch=st.sampled_from([(), (2,)]),
    dtype=DTYPES,
    seed=SEEDS,
)
def test_rank_deficient_property(shape, rank, batch, dtype, seed):
    check_rank_deficient(shape, rank, batch, dtype, seed)


@pytest.mark.slow  # lstsq runs by default in test_rank_deficient_matrices
def test_lstsq_of_full_rank_system_and_vector_rhs():
    a, b = gaussian(3, (8, 4), np.float64), gaussian(4, (8,), np.float64)
    assert_exports_match_on(lambda a, b: jnp.linalg.lstsq(a, b), a, b, **_tol(np.float64), jit=True)


# -- eigh ---------------------------------------------------------------------------------------
def _eigh_canonical(a, lower=True):
    """eigh with each vector's sign fixed (largest-magnitude entry positive): the signs are
    the one thing LAPACK and the export may choose differently."""
    v, w = lax.linalg.eigh(a, lower=lower)
    if a.shape[-1] == 0:
        return v, w
    at = jnp.argmax(jnp.abs(v), axis=-2, keepdims=True)
    return v * jnp.sign(jnp.take_along_axis(v, at, axis=-2)), w


def check_eigh(n, batch, dtype, seed, lower):
    """Values ascending as LAPACK's; vectors compared with their signs fixed (float32
    vectors to 1e-4: their accuracy is relative to the eigenvalue gaps)."""
    m = np.random.default_rng(seed).normal(size=(*batch, n, n)).astype(dtype)
    a = (
        m + np.swapaxes(m, -1, -2) + np.triu(m, 1) * (1 if lower else 0)
    )  # the unread triangle differs
    a = a if lower else np.swapaxes(a, -1, -2)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}
    assert_exports_match_on(lambda a: _eigh_canonical(a, lower), a, **tol, jit=True)


@pytest.mark.parametrize(
    ("n", "batch", "dtype", "lower"), [(5, (2,), np.float32, True), (8, (), np.float64, False)]
)
def test_eigh_matches_jax(n, batch, dtype, lower):
    check_eigh(n, batch, dtype, 0, lower)


@pytest.mark.slow
@settings(max_examples=3)  # each example exports the vectors (~3 s)
@given(
    n=st.sampled_from([0, 1, 2, 5, 8]), batch=BATCHES, dtype=DTYPES, seed=SEEDS, lower=st.booleans()
)
def test_eigh_property(n, batch, dtype, seed, lower):
    check_eigh(n, batch, dtype, seed, lower)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n", "dtype"), [(16, np.float32), (20, np.float64), (64, np.float32), (64, np.float64)]
)
def test_eigh_large(n, dtype):
    m = np.random.default_rng(n).normal(size=(2, n, n)).astype(dtype)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}
    assert_exports_match_on(_eigh_canonical, m + np.swapaxes(m, -1, -2), **tol, jit=True)


def _eigvalsh_scaled(form: str, lower: bool):
    """The eigenvalues over the largest |value| (the scale their rounding follows), as
    ``jnp.linalg.eigvalsh`` (the input symmetrized), ``eigh(a)[0]`` or ``lax.linalg.eigh``
    without symmetrizing (the other triangle unread)."""
    uplo = "L" if lower else "U"
    values = {
        "eigvalsh": lambda a: jnp.linalg.eigvalsh(a, UPLO=uplo),
        "eigh": lambda a: jnp.linalg.eigh(a, UPLO=uplo)[0],
        "lax": lambda a: lax.linalg.eigh(a, lower=lower, symmetrize_input=False)[1],
    }[form]

    def scaled(a):
        w = values(a)
        big = jnp.max(jnp.abs(w), axis=-1, keepdims=True)
        return w / jnp.where(big == 0, 1, big)

    return scaled


@pytest.mark.parametrize("n", [1, 2, 5, 25, 26, 130])
@settings(max_examples=2, deadline=None)
@given(
    batch=BATCHES,
    dtype=DTYPES,
    seed=SEEDS,
    form=st.sampled_from(["eigvalsh", "eigh", "lax"]),
    lower=st.booleans(),
)
def test_eigvalsh_matches_jax(n, batch, dtype, seed, form, lower):
    """eigh whose vectors nothing reads takes syevd's values-only path (sytd2 and the QL
    iterations without vectors) at every static size: JAX's values to rounding."""
    a = gaussian(seed, (*batch, n, n), dtype)  # not symmetric: only one triangle is read
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert_exports_match_on(_eigvalsh_scaled(form, lower), a, rtol=0, atol=tol, jit=True)


@pytest.mark.parametrize("n", [16, 26, 264, "N"])
def test_eigh_without_its_vectors_computes_none(n):
    """eigvalsh and eigh(a)[0] are one graph, lax's values that graph unsymmetrized: the
    tridiagonal reduction and the bisection's fixed number of steps, no Loop that iterates
    until convergence at a static size (eigh's vectors take steqr's QL Loop, stedc's merges
    or Jacobi's sweeps); at a symbolic size two Loops over the rows, the reduction's and
    the Sturm count's (Jacobi's: the sweeps, each with a Loop over its rounds)."""
    shape = (2, n, n)
    eigh = op_types(to_onnx(jnp.linalg.eigh, [shape]), nested=True)
    graphs = [
        op_types(to_onnx(_eigvalsh_scaled(f, True), [shape]), nested=True)
        for f in ("eigvalsh", "eigh", "lax")
    ]
    assert graphs[0] == graphs[1]  # lax's: the same without jnp's symmetrizing
    for ops in graphs:
        assert ops.count("Loop") == (2 if n == "N" else 0)
    assert eigh.count("Loop") >= 1


@pytest.mark.parametrize(
    ("shape", "sizes", "dtype"),
    [
        (("N", "N"), {"N": [1, 2, 5]}, np.float64),
        (("B", "N", "N"), {"B": [2, 1], "N": [3, 4]}, np.float32),
    ],
)
def test_eigh_of_symbolic_matrix_size(shape, sizes, dtype):
    """Symbolic sizes as for svd: the graph is the same for every N."""
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}
    both = lambda a: (*_eigh_canonical(a), jnp.linalg.eigvalsh(a))  # noqa: E731
    assert_exports_match(
        both,
        [(shape, dtype)],
        sizes=sizes,
        enable_double_precision=dtype == np.float64,
        **tol,
        jit=True,
    )


@pytest.mark.parametrize("n", [2, 4, 5, 8, 64])
def test_tournament_meets_every_pair_once_per_sweep(n):
    n += n % 2
    labels, met = np.arange(n), set()
    for _ in range(n - 1):
        met |= {frozenset(pair) for pair in zip(labels[: n // 2], labels[n // 2 :], strict=True)}
        labels = np.asarray(svd_module.reseat(labels[: n // 2], labels[n // 2 :]))
    assert len(met) == n * (n - 1) // 2


@pytest.mark.parametrize(
    ("fn", "sizes"),
    [(lambda a: lax.linalg.svd(a, compute_uv=False), (24, 40)), (jnp.linalg.eigh, (520, 544))],
    ids=["svd", "eigh"],
)
def test_graph_is_one_sweep_loop(fn, sizes):
    """The sweeps are one Loop (convergence-tested); above the unroll limit the rounds are an
    inner Loop, so the graph does not grow with n (eigh: above stedc.STEDC_LIMIT, Jacobi)."""
    nodes = {}
    for n in sizes:
        model = to_onnx(fn, [(n, n)])
        nodes[n] = len(model.graph.node)
        assert op_types(model).count("Loop") >= 1
    assert nodes[sizes[0]] == nodes[sizes[1]]


# -- subset_by_index: JAX's CPU path computes no subset, so the export refuses one too ----------
SUBSETS = {
    "eigh": lambda a: lax.linalg.eigh(a, subset_by_index=(1, 3)),
    "svd": lambda a: lax.linalg.svd(
        a, full_matrices=False, compute_uv=False, subset_by_index=(0, 2)
    ),
}


@pytest.mark.parametrize("name", SUBSETS)
def test_subset_by_index_is_refused_as_on_jax_cpu(name):
    """A test that fails the day JAX's CPU path computes a subset (then the export should)."""
    a = gaussian(0, (5, 5))
    a = a + a.T
    with pytest.raises(NotImplementedError, match="subset_by_index"):
        SUBSETS[name](a)  # the tests run on JAX's CPU backend
    with pytest.raises(
        ConversionError,
        match=rf"{name}\(subset_by_index=\(\d, \d\)\) at .*test_svd.py.*CPU.*refuse.*slice",
    ):
        to_onnx(SUBSETS[name], [a.shape])


def test_subset_by_index_of_the_whole_range_exports():
    """(0, n) is the whole decomposition, which JAX's CPU path computes."""
    m = gaussian(3, (2, 4, 4), np.float64)

    def whole(a):
        return (
            lax.linalg.eigh(a, subset_by_index=(0, 4))[1],
            lax.linalg.svd(a, compute_uv=False, full_matrices=False, subset_by_index=(0, 4)),
        )

    assert_exports_match_on(whole, m + np.swapaxes(m, -1, -2), **_tol(np.float64), jit=True)


def _eigh_defined(a):
    """What eigh defines whatever the basis of a repeated eigenvalue's space: the values, the
    reconstruction V diag(w) V^T and V^T V, over max |a| (the scale the errors follow)."""
    v, w = lax.linalg.eigh(a)
    big = jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True)
    big = jnp.where(big == 0, 1, big)
    return (
        w / big[..., 0],
        (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2) / big,
        jnp.swapaxes(v, -1, -2) @ v,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eigh_of_degenerate_matrices(dtype):
    """The zero matrix, the identity (one eigenvalue n times), eigenvalues repeated in pairs,
    and entries of 1e-20 and 1e20 (whose squares leave float32's range) as JAX's; a NaN entry
    makes every value NaN (JAX's LAPACK leaves some values finite: a NaN input's values are
    undefined beyond that)."""
    n = 5
    q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(n, n)))
    repeated = q @ np.diag([1.0, 1.0, -2.0, -2.0, 3.0]) @ q.T
    m = np.random.default_rng(2).normal(size=(n, n))
    gaussian_sym = m + m.T
    cases = np.stack(
        [np.zeros((n, n)), np.eye(n), repeated, 1e-20 * gaussian_sym, 1e20 * gaussian_sym]
    ).astype(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    assert_exports_match_on(_eigh_defined, cases, **tol, jit=True)
    # and without the vectors (syevd's values-only path)
    assert_exports_match_on(_eigvalsh_scaled("eigvalsh", True), cases, **tol, jit=True)
    nan = cases[2].copy()
    nan[0, 1] = nan[1, 0] = np.nan
    model = to_onnx(
        jnp.linalg.eigvalsh, [(nan.shape, dtype)], enable_double_precision=dtype == np.float64
    )
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    assert np.isnan(session.run(None, {session.get_inputs()[0].name: nan})[0]).all()
