"""hessenberg, tridiagonal (and the eigenproblem on them): onnxruntime vs JAX on
hypothesis-drawn sizes, batch dims and dtypes. The reductions use LAPACK's reflectors, so
their packed results are compared entry by entry (float32 1e-5 after scaling, float64 1e-10)."""

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax import lax

from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on
from tests.core.test_decompositions import BATCHES, DTYPES, SEEDS, _tol

# JAX's CPU gehrd/sytrd reject size 0
SIZES = st.sampled_from([1, 2, 5, 8])  # 20 and 64 (looped) below


def _gaussian(seed: int, batch: tuple, n: int, dtype) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(*batch, n, n)).astype(dtype)


def _reduction_tol(dtype) -> dict:
    """Each reflector's rounding feeds the next, so float32 entries of size ~sqrt(n) agree to
    about 1e-5 of that scale."""
    return _tol(dtype) if np.dtype(dtype) == np.float64 else {"rtol": 1e-4, "atol": 1e-4}


@given(n=SIZES, batch=BATCHES, dtype=DTYPES, seed=SEEDS)
def test_hessenberg_matches_jax(n, batch, dtype, seed):
    assert_exports_match_on(lax.linalg.hessenberg, _gaussian(seed, batch, n, dtype), **_reduction_tol(dtype))


@given(n=SIZES, batch=BATCHES, dtype=DTYPES, seed=SEEDS, lower=st.booleans())
def test_tridiagonal_matches_jax(n, batch, dtype, seed, lower):
    """Only the named triangle is read (the other one is Gaussian noise, kept as given)."""
    a = _gaussian(seed, batch, n, dtype)
    assert_exports_match_on(lambda a: lax.linalg.tridiagonal(a, lower=lower), a, **_reduction_tol(dtype))


def test_reductions_symbolic_batch_vmap_and_loop():
    for b in (1, 3):
        a = _gaussian(b, (b,), 4, np.float32)
        assert_exports_match(lax.linalg.hessenberg, [("B", 4, 4)], input_values=[a], rtol=1e-4, atol=1e-4)
        assert_exports_match(lax.linalg.tridiagonal, [("B", 4, 4)], input_values=[a], rtol=1e-4, atol=1e-4)
    assert_exports_match_on(jax.vmap(lax.linalg.hessenberg), _gaussian(0, (2,), 3, np.float64), **_tol(np.float64))
    model = assert_exports_match_on(lax.linalg.tridiagonal, _gaussian(0, (2,), 20, np.float64), **_tol(np.float64))
    assert len(model.graph.node) < 60  # one Loop, not 19 unrolled steps


@pytest.mark.slow
@pytest.mark.parametrize("fn", [lax.linalg.hessenberg, lax.linalg.tridiagonal])
def test_reductions_large(fn):
    assert_exports_match_on(fn, _gaussian(1, (2,), 64, np.float64), **_tol(np.float64))
