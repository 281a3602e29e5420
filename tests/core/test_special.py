"""Special functions and the samplers built on them: onnxruntime vs JAX over each function's
whole domain (poles, roots, tiny and huge arguments, NaN and inf).

The reference is JAX, not SciPy. Where JAX's own float32 rounding error exceeds 1e-5 (the
incomplete gamma / beta functions at large parameters, where a log x - x - lgamma(a)
cancels; zeta near its pole at x = 1) the tolerance is that error bound, computed from the
drawn arguments. XLA on CPU flushes subnormal results to zero and onnxruntime keeps them: the
arguments avoid the few bands where that decides the result.
"""

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.testing import assert_exports_match_on

FLOATS = [np.float32, np.float64]
# the default run: float32 everywhere, float64 for the lax primitives lowered here; float64 of
# functions that are JAX code over those primitives, and the functions that exported before
# these rules, run with --run-slow
FLOATS_SLOW64 = [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)]
slow = pytest.mark.slow


def _cases(table, core=(), slow_names=()):
    """(name, dtype) parameters: float64 only for ``core`` by default, ``slow_names`` slow."""
    cases = []
    for name in sorted(table):
        for dtype in FLOATS:
            is_slow = name in slow_names or (dtype == np.float64 and name not in core)
            cases.append(
                pytest.param(name, dtype, marks=slow) if is_slow else pytest.param(name, dtype)
            )
    return cases


SIZE = 32
BASE_TOL = {np.float32: 1e-5, np.float64: 1e-12}
# poles, roots and branch points every function meets, plus the IEEE specials
POLES = [float(k) + d for k in range(-10, 3) for d in (0.0, 1e-6, -1e-6, 1e-3, -1e-3, 0.5)]
SPECIALS = [0.0, -0.0, 1.0, 2.0, -1.0, 0.5, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e30, -1e30]


def _values(dtype, lo=None, hi=None, edges=(), size=None):
    """Arrays of normal floats in [lo, hi] (everything, inf/NaN included, when unbounded) mixed
    with ``edges``; XLA flushes subnormal inputs to zero, so none are drawn."""
    width = np.finfo(dtype).bits
    bounded = lo is not None
    if bounded:  # bounds representable in dtype, rounded inward
        lo = (
            float(np.nextafter(dtype(lo), dtype(np.inf)))
            if float(dtype(lo)) < lo
            else float(dtype(lo))
        )
        hi = (
            float(np.nextafter(dtype(hi), dtype(-np.inf)))
            if float(dtype(hi)) > hi
            else float(dtype(hi))
        )
    floats = st.floats(
        lo,
        hi,
        width=width,
        allow_subnormal=False,
        allow_nan=not bounded,
        allow_infinity=not bounded,
    )
    edge_values = [
        float(dtype(e)) for e in edges if (not bounded or (lo <= e <= hi)) or np.isnan(e)
    ]
    elements = floats | st.sampled_from(edge_values) if edge_values else floats
    # one size per test: JAX's per-shape compilation caches then serve every example
    return hnp.arrays(dtype, SIZE if size is None else size, elements=elements)


def _matches(fn, *values, rtol=None, atol=None):
    dtype = next(v.dtype.type for v in values if v.dtype.kind == "f")
    tol = BASE_TOL[dtype]
    try:
        assert_exports_match_on(fn, *values, rtol=rtol or tol, atol=atol or tol)
    except ConversionError as err:
        if "bitcast_convert_type" in str(err):  # float -> int bitcast: issue 11, bit-level ops
            pytest.skip(f"this JAX version computes it through a float -> int bitcast: {err}")
        raise


# -- one-argument functions over their whole domain ------------------------------------------

UNARY = {
    "lgamma": (lax.lgamma, None, None, POLES + SPECIALS),
    "gammaln": (jsp.gammaln, None, None, POLES + SPECIALS),
    # exp(lgamma) with its sign from a bitcast (signbit): exp multiplies lgamma's absolute
    # rounding (JAX's float32 lgamma is within an ulp of ~|lgamma|) into the relative error, so
    # beyond |x| = 15 float32 results differ by more than 1e-5 relative
    "gamma": (jsp.gamma, -15.0, 15.0, POLES + SPECIALS + [-2.5, -0.5, 1e-8]),
    "digamma": (lax.digamma, None, None, POLES + SPECIALS + [1.4616321, -0.5040830, -1e5 + 0.5]),
    "erfc": (lax.erfc, None, None, SPECIALS + [-1.0, 0.99, 1.01, 2.0, 5.0, 8.0, 9.0, 26.0, -6.0]),
    "bessel_i0e": (lax.bessel_i0e, None, None, SPECIALS + [8.0, -8.0, 7.99, 8.01]),
    "bessel_i1e": (lax.bessel_i1e, None, None, SPECIALS + [8.0, -8.0, 7.99, 8.01]),
    "i0": (jsp.i0, -700, 700, [0.0, 8.0, -8.0, 88.0]),
    "jnp.i0": (jnp.i0, -700, 700, [0.0, 8.0, -8.0, 88.0]),
    "i1": (jsp.i1, -700, 700, [0.0, 8.0, -8.0, 88.0]),
    "i0e": (jsp.i0e, None, None, SPECIALS),
    "i1e": (jsp.i1e, None, None, SPECIALS),
    "ndtr": (jsp.ndtr, None, None, SPECIALS + [-5.0, -10.0, -37.0, 5.0, 0.7071]),
    "log_ndtr": (jsp.log_ndtr, None, None, SPECIALS + [-5.0, -10.0, -20.0, -37.0, 5.0, 6.0, 8.0]),
    "entr": (jsp.entr, None, None, SPECIALS),
    "expit": (jsp.expit, None, None, SPECIALS + [-100.0, 100.0]),
    "logit": (jsp.logit, None, None, [0.0, 1.0, 0.5, 1e-7, 0.9999, -0.5, 2.0, np.nan]),
    "sinc": (jnp.sinc, None, None, SPECIALS + [1e-8, -3.0, 3.0, 0.25]),
    "spence": (jsp.spence, None, None, SPECIALS + [0.5, 2.0, 1e-8, 10.0]),
    "ndtri": (jsp.ndtri, 0.0, 1.0, [0.0, 1.0, 0.5, 1e-30, 1e-10, 0.135, 1 - 1e-7]),
}
# erfcx: exp(x^2) erfc(x) in JAX, where erfc(x) is flushed to zero just below the switch to
# the asymptotic series: keep x below that band
ERFCX_MAX = {np.float32: 9.1, np.float64: 26.5}


UNARY_CORE = ("lgamma", "digamma", "erfc", "bessel_i0e", "bessel_i1e", "gamma")
UNARY_SLOW = ("entr", "expit", "logit", "sinc", "spence", "ndtri", "log_ndtr", "i0", "i1e")


@pytest.mark.parametrize(("name", "dtype"), _cases(UNARY, UNARY_CORE, UNARY_SLOW))
@given(data=st.data())
def test_unary(name, dtype, data):
    fn, lo, hi, edges = UNARY[name]
    x = data.draw(_values(dtype, lo, hi, edges))
    _matches(fn, x)


@slow
@pytest.mark.parametrize("dtype", FLOATS)
@given(data=st.data())
def test_erfcx(dtype, data):
    x = data.draw(_values(dtype, -26.0, ERFCX_MAX[dtype], [0.0, -1.0, 1.0, 5.0, -26.0]))
    _matches(jsp.erfcx, x)


@pytest.mark.parametrize("dtype", FLOATS)
@given(data=st.data())
def test_erfc_tail_is_relatively_accurate(dtype, data):
    """erfc(x) for large x is tiny: the tolerance is relative only (1 - erf(x) was 0 here)."""
    hi = {np.float32: 9.0, np.float64: 26.0}[dtype]
    x = data.draw(_values(dtype, 1.0, hi, [1.0, 2.0, 8.0, hi]))
    model = assert_exports_match_on(lax.erfc, x, rtol=BASE_TOL[dtype] * 10, atol=0.0)
    assert "Erf" not in {n.op_type for n in model.graph.node}


# -- two- and three-argument functions -------------------------------------------------------


def _positive(dtype, hi=1e3, size=None):
    return _values(dtype, 0.0, hi, [0.0, 1e-30, 1e-3, 0.5, 1.0, 2.0, 10.0, 100.0, hi], size=size)


def _lgamma(a):
    return np.array([math.lgamma(v) if np.isfinite(v) and v > 0 else 0.0 for v in np.ravel(a)])


def _gamma_tolerance(dtype, a, x):
    """JAX's float32 error bound for the incomplete gamma family: the rounding of
    a log x - x - lgamma(a), which is exponentiated."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.abs(a * np.log(x)) + np.abs(x) + np.abs(_lgamma(a).reshape(a.shape))
    scale = float(np.nanmax(np.where(np.isfinite(terms), terms, 0.0), initial=0.0))
    return BASE_TOL[dtype] + 8 * np.finfo(dtype).eps * scale


GAMMA_FAMILY = {
    "igamma": lax.igamma,
    "igammac": lax.igammac,
    "gammainc": jsp.gammainc,
    "gammaincc": jsp.gammaincc,
    "igamma_grad_a": lax.igamma_grad_a,
    "random_gamma_grad": lax.random_gamma_grad,
}


# the same loops as igamma / igammac (JAX's series and continued fraction in other modes)
GAMMA_SLOW = ("gammainc", "gammaincc", "igamma_grad_a", "random_gamma_grad", "igammac")


@pytest.mark.parametrize(("name", "dtype"), _cases(GAMMA_FAMILY, ("igamma",), GAMMA_SLOW))
@given(data=st.data())
def test_incomplete_gamma(name, dtype, data):
    a = data.draw(_positive(dtype))
    # (for a within ~1e3 of the smallest normal, XLA's exp(a log x - x - lgamma(a)) ~ a is at the
    # subnormal boundary and its flush to zero gives igamma 0 where the value is ~1: drawn
    # igamma(1.1754944e-38, 1e-30) = 0 in JAX; the subnormal limitation in docs/limitations.md)
    tiny = np.finfo(dtype).tiny * 1e3
    a = np.where((a > 0) & (a < tiny), dtype(tiny), a)
    x = data.draw(_values(dtype, 0.0, 1e3, [0.0, 1e-30, 0.5, 1.0, 3.0, 30.0], size=a.size))
    specials = np.array([0.0, np.inf, np.nan, 1.0], dtype)
    a, x = (
        np.concatenate([a, specials, specials[::-1]]),
        np.concatenate([x, specials[::-1], specials]),
    )
    tol = _gamma_tolerance(dtype, a, x)
    _matches(GAMMA_FAMILY[name], a, x, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS_SLOW64)
@given(data=st.data())
def test_betainc(dtype, data):
    n = SIZE
    ab = _values(dtype, 0.0, 300.0, [0.0, 1e-3, 0.5, 1.0, 2.0, 50.0, 300.0], size=n)
    a, b = data.draw(ab), data.draw(ab)
    x = data.draw(_values(dtype, 0.0, 1.0, [0.0, 1.0, 0.5, 1e-6, 1 - 1e-6], size=n))
    edges = np.array([0.0, 1.0, np.inf, np.nan, -1.0], dtype)
    a, b, x = (
        np.concatenate([v, edges[np.roll(np.arange(5), i)]]) for i, v in enumerate((a, b, x))
    )
    x[-1] = dtype(1.5)  # x outside [0, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = [_lgamma(a), _lgamma(b), _lgamma(a + b), a * np.log(x), b * np.log1p(-x)]
    scale = sum(float(np.nanmax(np.where(np.isfinite(s), np.abs(s), 0.0))) for s in scale)
    tol = BASE_TOL[dtype] + 8 * np.finfo(dtype).eps * scale
    _matches(jsp.betainc, a, b, x, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS)
@given(data=st.data())
def test_zeta(dtype, data):
    s = data.draw(_values(dtype, 1.0, 60.0, [1.0, 1.001, 1.5, 2.0, 3.0, 4.0, 59.0]))
    q = data.draw(
        _values(dtype, -20.0, 1e3, [0.0, -1.0, -2.5, -3.0, 1e-3, 0.5, 1.0, 2.0], size=s.size)
    )
    s, q = (
        np.concatenate([s, np.array([0.5, np.inf, np.nan, 2.0], dtype)]),
        np.concatenate([q, np.array([1.0, 1.0, 1.0, np.nan], dtype)]),
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        cond = np.where((s > 1) & np.isfinite(s), s / (s - 1), 0.0)
    tol = BASE_TOL[dtype] + 4 * np.finfo(dtype).eps * float(np.nanmax(cond))
    _matches(lax.zeta, s, q, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS_SLOW64)
@given(data=st.data())
def test_polygamma(dtype, data):
    x = data.draw(_values(dtype, -20.0, 1e3, POLES + [1e-3, 0.3, 100.0]))
    n = data.draw(
        hnp.arrays(
            dtype, x.shape, elements=st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 1.5, -1.0])
        )
    )
    _matches(lax.polygamma, n, x)


BINARY = {
    "betaln": (jsp.betaln, 0.0, 1e3),
    "xlogy": (jsp.xlogy, 0.0, 1e30),
    "xlog1py": (jsp.xlog1py, -1.0, 1e30),
    "kl_div": (jsp.kl_div, 0.0, 1e3),
    "rel_entr": (jsp.rel_entr, 0.0, 1e3),
    "beta": (jsp.beta, 0.0, 30.0),
}


@pytest.mark.parametrize(
    ("name", "dtype"), _cases(BINARY, (), ("xlogy", "xlog1py", "kl_div", "rel_entr", "betaln"))
)
@given(data=st.data())
def test_binary(name, dtype, data):
    fn, lo, hi = BINARY[name]
    x = data.draw(_values(dtype, lo, hi, [0.0, 1.0, 1e-3, 0.5, 10.0, hi]))
    y = data.draw(_values(dtype, lo, hi, [0.0, 1.0, 1e-3, 0.5, 10.0, hi], size=x.size))
    # kl_div / rel_entr / betaln subtract terms of size |x log y|: JAX's rounding of those
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.abs(x) + np.abs(y) + np.abs(x * np.log(y)) + _lgamma(x + y).reshape(x.shape)
    tol = BASE_TOL[dtype] + 8 * np.finfo(dtype).eps * float(
        np.nanmax(np.where(np.isfinite(terms), terms, 0.0))
    )
    _matches(fn, x, y, rtol=tol, atol=tol)


@slow
@pytest.mark.parametrize("dtype", FLOATS)
@given(data=st.data(), axis=st.sampled_from([None, 0, -1]), keepdims=st.booleans())
def test_logsumexp(dtype, data, axis, keepdims):
    x = data.draw(
        hnp.arrays(
            dtype,
            (3, 4),
            elements=st.floats(-1e3, 1e3, width=np.finfo(dtype).bits)
            | st.sampled_from([-np.inf, 0.0]),
        )
    )
    b = data.draw(hnp.arrays(dtype, (3, 4), elements=st.floats(-2, 2, width=np.finfo(dtype).bits)))
    _matches(
        lambda x, b: jsp.logsumexp(x, axis=axis, b=b, keepdims=keepdims, return_sign=True), x, b
    )
    _matches(lambda x: jax.nn.logsumexp(x, axis=axis, keepdims=keepdims), x)


# -- graphs -----------------------------------------------------------------------------------


def test_lgamma_is_elementwise_arithmetic():
    """float32 lgamma: no loop, computed in float64 (two casts)."""
    model = assert_exports_match_on(lax.lgamma, np.linspace(-5.5, 5.5, 12, dtype=np.float32))
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Cast") == 2 and "Loop" not in ops and len(ops) < 100


def test_igamma_loops_until_converged():
    """igamma's series and continued fraction are ONNX Loops with a convergence condition, as
    JAX's while loops are; the graph stays small."""
    a = np.array([0.5, 3.0, 30.0], np.float32)
    model = assert_exports_match_on(lax.igamma, a, a[::-1].copy())
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Loop") == 2 and len(ops) < 200


# -- samplers ---------------------------------------------------------------------------------

SAMPLERS = {
    "gamma": lambda k, a: jax.random.gamma(k, a, dtype=a.dtype),
    "loggamma": lambda k, a: jax.random.loggamma(k, a, dtype=a.dtype),
    "beta": lambda k, a: jax.random.beta(k, a, a[::-1], dtype=a.dtype),
    "dirichlet": lambda k, a: jax.random.dirichlet(k, jnp.stack([a, a[::-1]], -1), dtype=a.dtype),
    "t": lambda k, a: jax.random.t(k, a, dtype=a.dtype),
    "chisquare": lambda k, a: jax.random.chisquare(k, a, dtype=a.dtype),
    "poisson": lambda k, a: jax.random.poisson(k, a),
}
# one function object per sampler: JAX's compilation cache serves every example
SAMPLER_ON_KEY_DATA = {
    name: jax.jit(lambda k, a, sample=sample: sample(jax.random.wrap_key_data(k), a))
    for name, sample in SAMPLERS.items()
}
# shape parameters whose samples stay normal numbers (XLA flushes subnormal samples to zero)
SAMPLER_LO = {"loggamma": 1e-3}  # loggamma samples in log space
# (jax.random.gamma runs by default in tests/examples/test_gamma_sampling.py)


# Why (measured): JAX's rejection loop keeps the sample of the *last* iteration that accepts
# (k_out = select(accept, k, k_out), not masked by `accepted`), so every sample depends on the
# trip count, set by the slowest element -- one with a large lam, or a lam < 10 one, which runs
# the rejection loop at lam = 1e5. There the test s <= t subtracts lgamma(k + 1) ~ 1e6 from
# k log lam; our lgamma differs from XLA's by 1-4 ulp for part of the k (float64: 23-43% of k
# in 1e3..1e5, onnxruntime's Log vs XLA's; float32: 34% on JAX 0.10, which computes it in
# float32, 1% on JAX 0.12), which flips a borderline acceptance, changes the trip count and so
# many samples of the array (seen: 7 of 16 for one float64 key on JAX 0.10). Matching needs
# XLA's own log polynomials, not ONNX Log.
POISSON_XFAIL = pytest.mark.xfail(
    reason="lam > 400 or mixed with lam < 10: an ulp of lgamma flips a rejection step and the "
    "trip count that every sample depends on (see the comment)",
    strict=False,
)


def _sampler_cases():
    cases = _cases(SAMPLERS, (), ("gamma", "loggamma", "beta", "dirichlet", "t", "chisquare"))
    return [
        pytest.param(*c.values, marks=[*c.marks, slow, POISSON_XFAIL])
        if c.values[0] == "poisson"
        else c
        for c in cases
    ]


@pytest.mark.parametrize(("name", "dtype"), _sampler_cases())
@given(data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_sampler(name, dtype, data, seed):
    """Samples equal JAX's for the same key: integer-exact for poisson, float tolerance else."""
    lo = SAMPLER_LO.get(name, 0.5)
    a = data.draw(_values(dtype, lo, 1e3, [lo, 0.5, 1.0, 1.5, 9.9, 10.0, 30.0, 1e3]))
    key_data = np.asarray(jax.random.key_data(jax.random.key(seed)))
    fn = SAMPLER_ON_KEY_DATA[name]
    if name != "poisson":
        _matches(fn, key_data, a)
        return
    # poisson's rejection step compares log-densities: a one-ulp difference in log / lgamma
    # between onnxruntime and XLA flips a borderline accept now and then (measured: 0 of 2525
    # draws in a sweep, 1 of 32 for one key at lam = 36), so most, not all, samples are equal
    model = to_onnx(fn, [key_data, a], enable_double_precision=dtype == np.float64)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(
        None, dict(zip([i.name for i in session.get_inputs()], [key_data, a], strict=True))
    )[0]
    with jxi.x64(dtype == np.float64):
        want = np.asarray(fn(key_data, a))
    assert got.dtype == want.dtype and np.mean(got != want) <= 1 / 8, (got, want)
