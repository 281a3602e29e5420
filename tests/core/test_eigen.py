"""hessenberg, tridiagonal, eig, schur (real and complex) and the functions on them (eigvals, roots,
sqrtm): onnxruntime vs JAX on hypothesis-drawn sizes, batch dims and dtypes. The reductions use
LAPACK's reflectors, so their packed results are compared entry by entry. eig and schur leave order
and phase free: eigenpairs are compared in a fixed order (by a real key) with each vector's phase
fixed, Schur forms by what defines them (reconstruction, unitarity, triangle)."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import onnxruntime
import pytest
import scipy.linalg
import scipy.linalg.lapack
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jax import lax

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on
from jax2onnx_nn.testing.roundtrip import roundtrip
from tests.core.test_decompositions import BATCHES, DTYPES, SEEDS, _tol

# JAX's CPU gehrd/sytrd reject size 0
SIZES = st.sampled_from([1, 2, 5, 8])  # 20 and 64 (looped) below


def _gaussian(seed: int, batch: tuple, n: int, dtype) -> np.ndarray:
    """Gaussian entries (real and imaginary parts for a complex ``dtype``)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(*batch, n, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.normal(size=a.shape)
    return a.astype(dtype)


def _reduction_tol(dtype) -> dict:
    """Each reflector's rounding feeds the next, and the last reflectors' entries are not well
    conditioned in the input: for one 8x8 Gaussian matrix (seed 3845, upper tridiagonal) JAX's
    own float32 diagonal is 1.5e-4 from the float64 one and ours 2.1e-4 (3.6e-4 apart), so float32
    is compared at 1e-3 absolute (entries of size ~sqrt(n)); float64 at the usual bar."""
    return _tol(dtype) if np.dtype(dtype) == np.float64 else {"rtol": 1e-4, "atol": 1e-3}


@settings(max_examples=3)
@given(n=SIZES, batch=BATCHES, dtype=DTYPES, seed=SEEDS)
def test_hessenberg_matches_jax(n, batch, dtype, seed):
    assert_exports_match_on(
        lax.linalg.hessenberg, _gaussian(seed, batch, n, dtype), **_reduction_tol(dtype)
    )


@settings(max_examples=3)
@given(n=SIZES, batch=BATCHES, dtype=DTYPES, seed=SEEDS, lower=st.booleans())
def test_tridiagonal_matches_jax(n, batch, dtype, seed, lower):
    """Only the named triangle is read (the other one is Gaussian noise, kept as given)."""
    a = _gaussian(seed, batch, n, dtype)
    assert_exports_match_on(
        lambda a: lax.linalg.tridiagonal(a, lower=lower), a, **_reduction_tol(dtype)
    )


def _lapack_reduction(reduction: str, a: np.ndarray) -> list[np.ndarray]:
    """LAPACK's float64 answer (dgehrd / dsytrd, lower as JAX's default) on ``a``'s values,
    packed as JAX's outputs."""
    a64 = np.asarray(a, np.float64)
    if reduction == "hessenberg":
        packed, taus, _ = scipy.linalg.lapack.dgehrd(a64)
        return [packed, taus]
    packed, d, e, taus, _ = scipy.linalg.lapack.dsytrd(a64, lower=1)
    return [packed, d, e, taus]


@settings(max_examples=6, deadline=None)
@given(
    n=st.sampled_from([3, 6]),
    dtype=DTYPES,
    seed=SEEDS,
    exponent=st.sampled_from([-22, -30, -170, -300]),
    reduction=st.sampled_from(["hessenberg", "tridiagonal"]),
)
# float32 at 1e-22: the trailing block d G d is ~1e-44, subnormal (JAX's CPU kernels flush it to 0)
@example(n=6, dtype=np.float32, seed=0, exponent=-22, reduction="hessenberg")
@example(n=6, dtype=np.float32, seed=0, exponent=-22, reduction="tridiagonal")
def test_reductions_of_matrices_far_below_one(n, dtype, seed, exponent, reduction):
    """A reflector's column whose squares leave the float range (its magnitudes summing below
    2^-40 in float32, 2^-459 in float64) is lifted by a power of two first, as dlarfg
    rescales: the rows and columns of d G d, d = (1, 10^e, ...), after the first give such
    columns (float32 Hessenberg forms at 1e-22 had taus 100% off, denormal squares).

    Compared with LAPACK in float64 on the same inputs (JAX's float32 kernels flush subnormal
    inputs to zero: not a reference there), each output to rounding of its largest entry: a
    reduction of n <= 6 reflectors is backward stable to ~n^2 eps (float32 ~2e-6, measured
    <= 1.7e-7 over 40 seeds; float64 ~4e-15), so 1e-5 / 1e-12. Where the input holds subnormal
    numbers (float32 at 1e-22: the trailing block ~1e-44 keeps 1-3 significant bits), the
    reflectors after the first are computed from those bits alone and are determined only to
    O(1) (measured 0.4 off float64's); there the first reflector, made of normal numbers, is
    compared, and the others are checked for what defines them: finite, each tau 0 or in [1, 2]."""
    if dtype == np.float32:
        exponent = max(exponent, -30)
    d = np.where(np.arange(n) < 1, 1.0, 10.0**exponent)
    a = (d[:, None] * np.random.default_rng(seed).normal(size=(n, n)) * d[None, :]).astype(dtype)
    fn = {"hessenberg": lax.linalg.hessenberg, "tridiagonal": lax.linalg.tridiagonal}[reduction]
    model = to_onnx(fn, [a], enable_double_precision=dtype == np.float64)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    ours = [o.astype(np.float64) for o in session.run(None, {session.get_inputs()[0].name: a})]
    expected = _lapack_reduction(reduction, a)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    if np.any((a != 0) & (np.abs(a) < np.finfo(dtype).tiny)):
        assert all(np.isfinite(o).all() for o in ours)
        taus = ours[-1]
        assert np.all((np.abs(taus) <= tol) | ((taus >= 1 - tol) & (taus <= 2 + tol))), taus
        ours = [ours[0][:, 0], ours[-1][:1]]  # the first reflector: packed column 0, its tau
        expected = [expected[0][:, 0], expected[-1][:1]]
    for o, t in zip(ours, expected, strict=True):
        assert np.abs(o - t).max() <= tol * np.abs(t).max(), (o, t)


def test_reduction_symbolic_batch():
    """The default subset's symbolic case: one export with a batch dim "B", run at two sizes."""
    assert_exports_match(
        lax.linalg.hessenberg, [("B", 4, 4)], sizes={"B": [1, 3]}, rtol=1e-4, atol=1e-4
    )


@pytest.mark.slow  # ~8 s of exports
def test_reductions_symbolic_batch_vmap_and_loop():
    for b in (1, 3):
        a = _gaussian(b, (b,), 4, np.float32)
        assert_exports_match(
            lax.linalg.hessenberg, [("B", 4, 4)], input_values=[a], rtol=1e-4, atol=1e-4
        )
        assert_exports_match(
            lax.linalg.tridiagonal, [("B", 4, 4)], input_values=[a], rtol=1e-4, atol=1e-4
        )
    assert_exports_match_on(
        jax.vmap(lax.linalg.hessenberg), _gaussian(0, (2,), 3, np.float64), **_tol(np.float64)
    )
    model = assert_exports_match_on(
        lax.linalg.tridiagonal, _gaussian(0, (2,), 20, np.float64), **_tol(np.float64)
    )
    assert len(model.graph.node) < 60  # one Loop, not 19 unrolled steps


@pytest.mark.slow
@pytest.mark.parametrize("fn", [lax.linalg.hessenberg, lax.linalg.tridiagonal])
def test_reductions_large(fn):
    assert_exports_match_on(fn, _gaussian(1, (2,), 64, np.float64), **_tol(np.float64))


# -- eig ---------------------------------------------------------------------------------------
def _in_order(w: jax.Array, *vectors: jax.Array) -> tuple:
    """Eigenpairs sorted by the real key re + 0.37 im (distinct for a conjugate pair), each
    vector's phase fixed (its largest entry real positive): what LAPACK and the export share."""
    order = jnp.argsort(jnp.real(w) + 0.37 * jnp.imag(w), axis=-1)
    out = [jnp.take_along_axis(w, order, axis=-1)]
    for v in vectors:
        if v.shape[-1] == 0:  # no vector to order (argmax of an empty column is undefined)
            out.append(v)
            continue
        v = jnp.take_along_axis(v, jnp.broadcast_to(order[..., None, :], v.shape), axis=-1)
        lead = jnp.take_along_axis(v, jnp.argmax(jnp.abs(v), axis=-2, keepdims=True), axis=-2)
        out.append(v * jnp.conj(lead) / jnp.abs(lead))
    return tuple(out)


def _eig_tol(dtype) -> dict:
    """Eigenvalues of a Gaussian matrix have condition numbers ~10: float32 to 1e-4."""
    return (
        _tol(np.float64) if np.finfo(dtype).bits == 64 else {"rtol": 1e-4, "atol": 1e-4}
    )  # complex128 too


def _eig(left: bool, right: bool):
    return lambda a: _in_order(
        *lax.linalg.eig(a, compute_left_eigenvectors=left, compute_right_eigenvectors=right)
    )


@pytest.mark.parametrize(
    ("n", "batch", "dtype"),
    [
        (4, (2,), np.float64),
        (3, (), np.complex128),
        pytest.param(3, (), np.float32, marks=pytest.mark.slow),
        pytest.param(4, (2,), np.complex64, marks=pytest.mark.slow),
    ],
)
def test_eig_matches_jax(n, batch, dtype):
    """Values, left and right vectors of Gaussian matrices: real ones (real and complex-pair
    eigenvalues) and complex ones; each vector of norm 1 with a real largest entry, as LAPACK's."""
    assert_exports_match_on(_eig(True, True), _gaussian(n, batch, n, dtype), **_eig_tol(dtype))


@pytest.mark.slow
@given(
    n=st.sampled_from([0, 1, 2, 5, 8]),
    batch=BATCHES,
    dtype=st.sampled_from([np.float32, np.float64, np.complex64, np.complex128]),
    seed=SEEDS,
    left=st.booleans(),
    right=st.booleans(),
)
def test_eig_matches_jax_drawn(n, batch, dtype, seed, left, right):
    assert_exports_match_on(_eig(left, right), _gaussian(seed, batch, n, dtype), **_eig_tol(dtype))


@pytest.mark.parametrize("n", [24, pytest.param(64, marks=pytest.mark.slow)])
def test_eig_in_chase_windows(n):
    """Above 19 rows a QR sweep runs in windows of the rows it chases (eigen.CHASE_WINDOW),
    the last one clamped to the matrix's end: values, left and right vectors as JAX's."""
    assert_exports_match_on(_eig(True, True), _gaussian(n, (2,), n, np.float64), **_tol(np.float64))


@pytest.mark.slow
def test_eig_large_symbolic_batch_and_vmap():
    assert_exports_match_on(
        _eig(False, True), _gaussian(1, (2,), 16, np.float64), **_tol(np.float64)
    )
    for b in (1, 3):
        assert_exports_match(
            lambda a: _in_order(jnp.linalg.eigvals(a)),
            [("B", 4, 4)],
            input_values=[_gaussian(b, (b,), 4, np.float32)],
            rtol=1e-4,
            atol=1e-4,
        )
    assert_exports_match_on(
        jax.vmap(lambda a: _in_order(*jnp.linalg.eig(a))),
        _gaussian(0, (3,), 3, np.float64),
        **_tol(np.float64),
    )


# -- schur (complex), and the functions on eig and schur -----------------------------------------
def _schur_defined(a: jax.Array) -> tuple:
    """What defines a complex Schur form: a = z t z^H, z unitary, t upper triangular, the
    multiset of t's diagonal (its real parts sorted) equal to a's eigenvalues."""
    t, z = jsl.schur(a, output="complex")
    zh = jnp.conj(z.T)
    eye = jnp.eye(a.shape[0])
    return (
        jnp.abs(z @ t @ zh - a).max(),
        jnp.abs(zh @ z - eye).max(),
        jnp.abs(jnp.tril(t, -1)).max(),
        jnp.sort(jnp.real(jnp.diagonal(t))),
    )


def _real_schur_defined(a: jax.Array, vectors: bool = True, **params) -> tuple:
    """What defines a real Schur form (LAPACK's gees, the convention JAX's CPU result
    follows): a = z t z^T with z orthogonal; t zero below its subdiagonal, no two adjacent
    subdiagonal entries nonzero (blocks of 1 or 2 rows), each 2x2 block standard ([[x, b],
    [c, x]] with b c < 0: a complex pair x +- i sqrt(-b c)); its eigenvalues those of a."""
    t, *z = lax.linalg.schur(a, compute_schur_vectors=vectors, **params)
    n = a.shape[-1]
    zero = jnp.zeros((), a.dtype)
    diag, sup, sub = (jnp.diagonal(t, k, -2, -1) for k in (0, 1, -1))
    block = sub != 0
    pair = (
        jnp.sqrt(jnp.where(block, -sup * sub, zero)) * 1j
    )  # block j: w_j = x + i r, w_j+1 = x - i r
    w = (
        diag
        + jnp.pad(pair, [(0, 0)] * (a.ndim - 2) + [(0, 1)])
        - jnp.pad(pair, [(0, 0)] * (a.ndim - 2) + [(1, 0)])
    )
    form = [
        jnp.abs(jnp.tril(t, -2)).max(initial=0),
        jnp.abs(sub[..., 1:] * sub[..., :-1]).max(initial=0),
        jnp.abs(jnp.where(block, diag[..., :-1] - diag[..., 1:], zero)).max(initial=0),
        jnp.all(jnp.where(block, sup * sub < 0, True)),
        _in_order(w)[0],
    ]
    if vectors:
        z = z[0]
        eye = jnp.eye(n, dtype=a.dtype)
        form += [
            jnp.abs(z @ t @ _mT(z) - a).max(initial=0),
            jnp.abs(_mT(z) @ z - eye).max(initial=0),
        ]
    return tuple(form)


def _mT(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, -1, -2)


@pytest.mark.parametrize(
    ("n", "batch", "dtype", "vectors"), [(5, (2,), np.float64, True), (4, (), np.float32, False)]
)
def test_real_schur_matches_jax(n, batch, dtype, vectors):
    """Real Schur forms of Gaussian matrices (real eigenvalues and complex pairs), with and
    without the vectors, compared by what defines them."""
    assert_exports_match_on(
        lambda a: _real_schur_defined(a, vectors), _gaussian(n, batch, n, dtype), **_eig_tol(dtype)
    )


@pytest.mark.slow
@settings(max_examples=3)
@given(
    n=st.sampled_from([0, 1, 2, 3, 5, 8]),
    batch=BATCHES,
    dtype=DTYPES,
    seed=SEEDS,
    vectors=st.booleans(),
)
def test_real_schur_matches_jax_drawn(n, batch, dtype, seed, vectors):
    assert_exports_match_on(
        lambda a: _real_schur_defined(a, vectors),
        _gaussian(seed, batch, n, dtype),
        **_eig_tol(dtype),
    )


@pytest.mark.slow
@pytest.mark.parametrize("case", ["16x16", "permutation", "nan", "symmetric", "select_callable"])
def test_real_schur_cases(case):
    """A size past the unroll limit; a cyclic permutation (the standard double shift stalls on
    it: the exceptional shifts converge it); NaN in, NaN out; a symmetric matrix (diagonal t);
    a ``select_callable``, which JAX's CPU lowering ignores (unsorted result), and so do we."""
    a = {
        "16x16": _gaussian(4, (2,), 16, np.float64),
        "permutation": np.roll(np.eye(6), 1, axis=0),
        "nan": np.where(np.eye(4) > 0, np.nan, _gaussian(0, (), 4, np.float64)),
        "symmetric": (lambda g: g + g.T)(_gaussian(5, (), 6, np.float64)),
        "select_callable": _gaussian(6, (), 5, np.float64),
    }[case]
    fn = {
        "nan": lambda a: lax.linalg.schur(a)[0],
        "select_callable": lambda a: _real_schur_defined(
            a, select_callable=lambda w: jnp.real(w) > 0
        ),
    }.get(case, _real_schur_defined)
    assert_exports_match_on(fn, a, **_tol(np.float64))


@pytest.mark.parametrize(
    ("name", "fn", "tol"),
    [
        ("schur", _schur_defined, 1e-10),
        # sqrtm's triangular recurrence amplifies rounding; it runs on the schur above
        pytest.param("sqrtm", jsl.sqrtm, 1e-8, marks=pytest.mark.slow),
        pytest.param(
            "roots",
            lambda p: _in_order(jnp.roots(p[0], strip_zeros=False)),
            1e-10,
            marks=pytest.mark.slow,
        ),
    ],
)
def test_functions_on_eig_and_schur(name, fn, tol):
    a = _gaussian(2, (), 4, np.float64)
    if name == "sqrtm":
        a = a @ a.T / 4 + np.eye(4)  # SPD: a real square root exists
    assert_exports_match_on(fn, a, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda a: lax.linalg.schur(a, sort_eig_vals=True), "sort_eig_vals=True"),
    ],
)
def test_unsupported_forms_are_refused(fn, match):
    a = _gaussian(0, (), 3, np.float32)
    with pytest.raises(ConversionError, match=match):
        roundtrip(fn, [a.shape], input_values=[a])


def test_symbolic_size_is_refused():
    with pytest.raises(ConversionError, match="symbolic size"):
        roundtrip(jnp.linalg.eigvals, [("N", "N")], sizes={"N": [3]})


@pytest.mark.parametrize("n", [20, 23])
def test_eigvals_in_chase_windows_of_structured_matrices(n):
    """Just above the window threshold (19 rows): the zero matrix, an upper triangular one
    (deflated before any sweep), a diagonal one, a Hessenberg one with zero subdiagonal entries
    (blocks) and a NaN entry (all NaN, as JAX's), batched: JAX's values."""
    g = np.random.default_rng(n).normal(size=(n, n))
    hess = np.triu(g, -1)
    blocks = hess * (np.arange(n) % 3 != 0)[None, :]
    nan = g.copy()
    nan[2, 3] = np.nan
    a = np.stack([np.zeros((n, n)), np.triu(g), np.diag(np.arange(n) - 3.0), hess, blocks])
    assert_exports_match_on(lambda a: _in_order(jnp.linalg.eigvals(a)), a, **_tol(np.float64))
    model = to_onnx(jnp.linalg.eigvals, [nan[None]], enable_double_precision=True)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (ours,) = session.run(None, {session.get_inputs()[0].name: nan[None]})
    assert np.isnan(ours).all() and np.isnan(np.asarray(jnp.linalg.eigvals(nan[None]))).all()


@pytest.mark.parametrize("n", [4, 8, 20])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eig_of_a_cyclic_permutation(n, dtype):
    """The Wilkinson shift of a cyclic permutation is 0, on which QR leaves the matrix as it
    is: without zlahqr's exceptional shift after STALLED_SWEEPS sweeps without a deflation at
    the block's bottom its values came out all 0, not the n-th roots of unity; next to a
    Gaussian matrix in the batch (which deflates on its own)."""
    a = np.stack(
        [np.roll(np.eye(n), 1, axis=0), np.random.default_rng(n).normal(size=(n, n))]
    ).astype(dtype)
    # (values only: every entry of its vectors has the same modulus, so the phase convention's
    # largest entry is a tie that rounding decides)
    assert_exports_match_on(lambda a: _in_order(jnp.linalg.eigvals(a)), a, **_eig_tol(dtype))


@pytest.mark.parametrize("n", [8, 20])
def test_float32_eigvals_of_entries_from_1e_minus_30_to_1e30(n):
    """float32 entries whose squares leave float32's range (1e20: 1e40; 1e-30: 1e-60): the
    matrix is divided by a power of two first (exactly, as svd's), so the values are float64
    LAPACK's to 1e-5 of the largest (they were NaN at 1e20 and 1e30, half their size at 1e-30;
    JAX 0.10's own float32 eig is ~1e12 at all four scales on this CPU, so numpy is the
    reference)."""
    g = np.random.default_rng(0).normal(size=(n, n))
    a = np.stack([g * s for s in (1e-30, 1e-20, 1e20, 1e30)]).astype(np.float32)
    model = to_onnx(jnp.linalg.eigvals, [a])
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (ours,) = session.run(None, {session.get_inputs()[0].name: a})
    ours = ours[..., 0] + 1j * ours[..., 1]
    reference = np.linalg.eigvals(a.astype(np.float64))
    big = np.max(np.abs(reference), axis=-1, keepdims=True)
    for part in (np.real, np.imag, np.abs):  # as multisets
        np.testing.assert_allclose(
            np.sort(part(ours), axis=-1) / big,
            np.sort(part(reference), axis=-1) / big,
            rtol=0,
            atol=1e-5,
        )


@pytest.mark.parametrize("output", ["complex", "real"])
def test_float32_schur_of_entries_1e_minus_30_and_1e20(output):
    """schur divides the matrix by a power of two first, as eig: at 1e20 and 1e-30 (squares
    past float32's range) t and z were NaN; now z t z^H is a to 1e-5 of max |a|, z unitary."""
    g = np.random.default_rng(1).normal(size=(6, 6))
    a = np.stack([g * 1e-30, g * 1e20]).astype(np.float32)
    model = to_onnx(lambda a: jsl.schur(a, output=output), [a])
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    t, z = session.run(None, {session.get_inputs()[0].name: a})
    if output == "complex":
        t, z = t[..., 0] + 1j * t[..., 1], z[..., 0] + 1j * z[..., 1]
    zh = np.conj(np.swapaxes(z, -1, -2))
    big = np.max(np.abs(a.astype(np.float64)), axis=(-2, -1), keepdims=True)
    np.testing.assert_allclose(np.abs(z @ t @ zh - a) / big, 0, atol=1e-5)
    np.testing.assert_allclose(np.abs(zh @ z - np.eye(6)), 0, atol=1e-5)


# -- balancing (gebal, gebak): eig as geev ---------------------------------------------------------
def _run_eig(fn, a: np.ndarray) -> list[np.ndarray]:
    """``fn`` exported on ``a`` and run in onnxruntime, complex results joined from their pairs."""
    model = to_onnx(fn, [a], enable_double_precision=a.dtype == np.float64)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return [
        o[..., 0] + 1j * o[..., 1] for o in session.run(None, {session.get_inputs()[0].name: a})
    ]


def _values_error(ours: np.ndarray, reference: np.ndarray) -> float:
    """max over the reference's values (the last axis) of the distance to the nearest of ours,
    relative to the largest reference value's modulus."""
    near = np.min(np.abs(ours[..., None, :] - reference[..., :, None]), axis=-1)
    return float(np.max(near / np.max(np.abs(reference), axis=-1, keepdims=True)))


def _badly_scaled(seed: int, batch: tuple, n: int, dtype) -> np.ndarray:
    """D G D^-1, G Gaussian, D diagonal with powers of ten from 1e-4 to 1e4: same values as G,
    entries from ~1e-8 to ~1e8 times G's."""
    rng = np.random.default_rng(seed)
    d = 10.0 ** rng.integers(-4, 5, size=(*batch, n))
    return (d[..., :, None] * rng.normal(size=(*batch, n, n)) / d[..., None, :]).astype(dtype)


def _condition(a: np.ndarray) -> float:
    """The largest eigenvalue condition number 1 / |y^H x| (unit left and right vectors) of the
    float64 matrices ``a``, for a bar that grows with it."""
    worst = 1.0
    for m in a.reshape(-1, *a.shape[-2:]).astype(np.float64):
        w, vl, vr = scipy.linalg.eig(m, left=True, right=True)
        worst = max(worst, float(np.max(1 / np.abs(np.sum(np.conj(vl) * vr, axis=0)))))
    return worst


@settings(max_examples=4, deadline=None)
@given(n=st.sampled_from([2, 5, 8]), batch=BATCHES, dtype=DTYPES, seed=SEEDS)
def test_eig_of_badly_scaled_matrices(n, batch, dtype, seed):
    """D G D^-1 (see _badly_scaled): balancing's powers of two undo D, so the values are float64
    LAPACK's to 1e-5 of the largest in float32 (times the values' condition number over 10 when
    that is larger), 1e-10 in float64 (they were 50% off in float32 without balancing); each right
    and left vector's residual is small componentwise (|a v - w v| against |a| |v| + |w| |v|)."""
    a = _badly_scaled(seed, batch, n, dtype)
    w, vl, vr = _run_eig(
        lambda a: lax.linalg.eig(
            a, compute_left_eigenvectors=True, compute_right_eigenvectors=True
        ),
        a,
    )
    bar = (1e-5 if dtype == np.float32 else 1e-10) * max(1.0, _condition(a) / 10)
    assert _values_error(w, np.linalg.eigvals(a.astype(np.float64))) <= bar
    a64 = a.astype(np.float64)
    for v, m in (
        (vr, a64),
        (vl, np.conj(np.swapaxes(a64, -1, -2))),
    ):  # u^H a = w u^H: a^H u = conj(w) u
        ww = w if m is a64 else np.conj(w)
        residual = np.abs(m @ v - v * ww[..., None, :])
        size = np.abs(m) @ np.abs(v) + np.abs(v) * np.abs(ww[..., None, :])
        assert np.max(residual / np.where(size == 0, 1, size)) <= 100 * bar
        np.testing.assert_allclose(
            np.linalg.norm(v, axis=-2), 1, rtol=1e-5 if dtype == np.float32 else 1e-12
        )


def test_eig_of_badly_scaled_matrix_matches_jax():
    """float64: values and both vectors as JAX's (which balances too), in a fixed order and
    phase."""
    assert_exports_match_on(
        _eig(True, True), _badly_scaled(3, (2,), 6, np.float64), **_tol(np.float64)
    )


def _block_triangular(seed: int, n: int, block: int, dtype) -> np.ndarray:
    """A permuted upper triangular matrix whose rows and columns lo..lo+block-1 are a dense block:
    gebal isolates every other value."""
    rng = np.random.default_rng(seed)
    m = np.triu(rng.normal(size=(n, n)) * (rng.random((n, n)) < 0.7))
    lo = int(rng.integers(0, n - block + 1))
    m[lo : lo + block, lo : lo + block] = rng.normal(size=(block, block))
    order = rng.permutation(n)
    return m[order][:, order].astype(dtype)


@settings(max_examples=4, deadline=None)
@given(
    n=st.sampled_from([3, 8, 20]),
    dtype=DTYPES,
    seed=SEEDS,
    kind=st.sampled_from(["lower", "upper", "permuted", "block"]),
)
def test_eigvals_of_triangular_and_block_triangular_matrices(n, dtype, seed, kind):
    """Triangular matrices (also permuted) have their diagonal as values, exactly and in JAX's
    order (gebal's permutation, LAPACK 3.12's search, puts them where geev does; a float32
    20x20 lower triangular one was ~3% of max |a| off without it); a block triangular one its
    isolated values so, the dense block's to the usual bar."""
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, n)).astype(dtype)
    a = {
        "lower": np.tril(g),
        "upper": np.triu(g),
        "permuted": (lambda p: np.triu(g)[p][:, p])(rng.permutation(n)),
        "block": _block_triangular(seed, n, min(3, n), dtype),
    }[kind]
    (ours,) = _run_eig(jnp.linalg.eigvals, a)
    with x64(dtype == np.float64):
        theirs = np.asarray(jnp.linalg.eigvals(a))
    if kind == "block":
        isolated = np.isclose(theirs.imag, 0) & np.isin(theirs.real, np.diagonal(a))
        np.testing.assert_array_equal(ours[isolated], theirs[isolated])
        assert _values_error(ours, np.linalg.eigvals(a.astype(np.float64))) <= (
            1e-5 if dtype == np.float32 else 1e-10
        )
    else:
        np.testing.assert_array_equal(ours, theirs)


@settings(max_examples=4, deadline=None)
@given(degree=st.sampled_from([3, 5, 9]), dtype=DTYPES, seed=SEEDS)
def test_roots_of_polynomials_with_wide_coefficient_ranges(degree, dtype, seed):
    """jnp.roots is eig of a companion matrix: coefficients from 1e-6 to 1e6 make it badly
    scaled; its roots are float64 numpy's to 1e-5 of the largest in float32, 1e-10 in float64."""
    rng = np.random.default_rng(seed)
    c = (rng.normal(size=degree + 1) * 10.0 ** rng.integers(-6, 7, size=degree + 1)).astype(dtype)
    (ours,) = _run_eig(lambda c: jnp.roots(c, strip_zeros=False), c)
    reference = np.roots(c.astype(np.float64))
    companion = np.diag(np.ones(degree - 1), -1)
    companion[0] = -c[1:].astype(np.float64) / c[0]
    bar = (1e-5 if dtype == np.float32 else 1e-10) * max(1.0, _condition(companion) / 10)
    assert _values_error(ours, reference) <= bar


@settings(max_examples=4, deadline=None)
@given(
    n=st.sampled_from([3, 8]),
    dtype=DTYPES,
    seed=SEEDS,
    kind=st.sampled_from(["lower", "permuted", "block"]),
    output=st.sampled_from(["real", "complex"]),
)
def test_schur_permutes_as_gees(n, dtype, seed, kind, output):
    """gees permutes too (gebal job 'P', no scaling): a triangular or permuted triangular matrix
    is its own Schur form permuted, t and z (a permutation) exactly JAX's; a block triangular
    one's t has its isolated values on the diagonal exactly where JAX's does, and a = z t z^H."""
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, n)).astype(dtype)
    a = {
        "lower": np.tril(g),
        "permuted": (lambda p: np.triu(g)[p][:, p])(rng.permutation(n)),
        "block": _block_triangular(seed, n, min(3, n), dtype),
    }[kind]
    t, z = (
        _run_eig(lambda a: jsl.schur(a, output=output), a) if output == "complex" else _run_schur(a)
    )
    with x64(dtype == np.float64):
        t_jax, z_jax = (np.asarray(x) for x in jsl.schur(a, output=output))
    if kind == "block":
        isolated = np.isin(
            np.diagonal(t_jax), np.diagonal(a)
        )  # (the dense block's values are not a's entries)
        np.testing.assert_array_equal(np.diagonal(t)[isolated], np.diagonal(t_jax)[isolated])
        big = np.abs(a).max()
        np.testing.assert_allclose(
            np.abs(z @ t @ np.conj(z.T) - a) / big, 0, atol=1e-5 if dtype == np.float32 else 1e-12
        )
    else:
        np.testing.assert_array_equal(t, t_jax)
        np.testing.assert_array_equal(z, z_jax)


def _run_schur(a: np.ndarray) -> list[np.ndarray]:
    model = to_onnx(jsl.schur, [a], enable_double_precision=a.dtype == np.float64)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {session.get_inputs()[0].name: a})


def _defective(seed: int, n: int, kind: str, dtype) -> np.ndarray:
    """Matrices with exactly equal eigenvalues that balancing isolates or keeps exact: a Jordan
    block of an integer value, a Gaussian matrix with a zero row and a zero column, a permuted
    strictly upper triangular (nilpotent) one."""
    rng = np.random.default_rng(seed)
    if kind == "jordan":
        a = np.eye(n) * rng.integers(-3, 4) + np.eye(n, k=1)
    elif kind == "zero row and column":
        a = rng.normal(size=(n, n))
        a[rng.integers(n)] = 0
        a[:, rng.integers(n)] = 0
    else:
        order = rng.permutation(n)
        a = np.triu(rng.normal(size=(n, n)), 1)[order][:, order]
    return a.astype(dtype)


@settings(max_examples=6, deadline=None)
@given(
    n=st.sampled_from([2, 3, 7, 12]),
    dtype=DTYPES,
    seed=SEEDS,
    kind=st.sampled_from(["jordan", "zero row and column", "nilpotent"]),
)
def test_eigenvectors_of_exactly_equal_eigenvalues(n, dtype, seed, kind):
    """Exactly equal diagonal entries of the Schur form make each row of the back substitution
    divide by smin (eps |t_kk| or the smallest normal): a float32 7x7 Jordan block's vectors
    overflowed to NaN, a matrix with a zero row and a zero column (isolated as exact zeros by
    balancing) gave NaN or zero vectors. Now, as LAPACK's: finite, norm 1, residuals
    |a v - w v| and |u^H a - w u^H| at rounding size of max |a|."""
    a = _defective(seed, n, kind, dtype)
    w, vl, vr = _run_eig(
        lambda a: lax.linalg.eig(
            a, compute_left_eigenvectors=True, compute_right_eigenvectors=True
        ),
        a,
    )
    assert np.all(np.isfinite(w)) and np.all(np.isfinite(vl)) and np.all(np.isfinite(vr))
    a64, tol = a.astype(np.float64), (1e-5 if dtype == np.float32 else 1e-12)
    big = max(float(np.abs(a64).max()), 1.0)
    for v, m, ww in ((vr, a64, w), (vl, a64.T, np.conj(w))):  # u^H a = w u^H: a^H u = conj(w) u
        np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, rtol=tol)
        assert np.abs(m @ v - v * ww[None, :]).max() <= tol * big


@settings(max_examples=6, deadline=None)
@given(
    dtype=DTYPES,
    seed=SEEDS,
    exponent=st.sampled_from([-15, -25, -100, -200]),
    kind=st.sampled_from(["small block", "ones"]),
)
def test_real_schur_of_a_block_far_below_the_largest_entry(dtype, seed, exponent, kind):
    """A Francis sweep's first column is quadratic in its block: for a block below ~sqrt(tiny)
    of max |a| (float32 1e-25, float64 1e-200), or the trailing block of rounding noise that the
    Hessenberg form of a matrix of ones leaves (float32 32x32; float64 19x19 to 24x24), it
    underflowed to a zero column, the sweeps made no progress and T and Z came out NaN (JAX's
    are finite; blocks at 1e-15 and 1e-100 also need the reflector's lift, see
    test_reductions_of_matrices_far_below_one). Now a = z t z^T with z orthogonal and t quasi
    upper triangular, to rounding size of max |a|."""
    rng = np.random.default_rng(seed)
    if kind == "ones":
        a = np.ones((32 if dtype == np.float32 else 20,) * 2, dtype)
    else:
        exponent = max(exponent, -25) if dtype == np.float32 else exponent
        a = np.zeros((7, 7))
        a[:3, :3], a[:3, 3:] = rng.normal(size=(3, 3)), rng.normal(size=(3, 4))
        a[3:, 3:] = 10.0**exponent * rng.normal(size=(4, 4))
        a = a.astype(dtype)
    t, z = _run_schur(a)
    n, tol = a.shape[-1], (1e-5 if dtype == np.float32 else 1e-12)
    assert np.all(np.isfinite(t)) and np.all(np.isfinite(z))
    a64, t64, z64 = (x.astype(np.float64) for x in (a, t, z))
    assert np.abs(z64 @ t64 @ z64.T - a64).max() <= tol * np.abs(a64).max()
    assert np.abs(z64.T @ z64 - np.eye(n)).max() <= tol
    assert not np.any(np.tril(t, -2))
    sub = np.diagonal(t, -1) != 0
    assert not np.any(sub[1:] & sub[:-1])  # blocks of 1 or 2 rows
