"""benchmarks/dstedc_reference.py (groundwork for issue 34) stays faithful to the LAPACK that
JAX runs: its dlaed4 equals OpenBLAS's bitwise, its dstedc gives OpenBLAS's vector signs."""

import numpy as np
import pytest

from benchmarks import dstedc_reference as ref


def test_dlaed4_bitwise_equal_to_openblas():
    rng = np.random.default_rng(0)
    for _ in range(30):
        k = int(rng.integers(1, 30))
        dlambda = np.sort(rng.normal(size=k))
        w = rng.normal(size=k)
        w /= np.linalg.norm(w)
        rho = float(abs(rng.normal()) + 0.1)
        for i in range(1, k + 1):
            delta_ref, lam_ref = ref.openblas_dlaed4(k, i, dlambda, w, rho)
            delta, lam = ref.dlaed4(k, i, dlambda, w, rho)
            assert lam == lam_ref and np.array_equal(delta, delta_ref), (k, i)


@pytest.mark.parametrize("family", ["gaussian", "sytrd", "clustered"])
def test_dstedc_signs_and_values_match_openblas(family):
    rng = np.random.default_rng(1)
    for n in (26, 33, 51, 64):
        d, e = ref.family(family, n, rng)
        values_ref, vectors_ref = ref.openblas_dstedc(d, e)
        values, vectors = ref.dstedc(d, e)
        assert np.all(np.sum(vectors * vectors_ref, axis=0) > 0.5), n
        np.testing.assert_allclose(values, values_ref, rtol=0, atol=1e-13 * max(1.0, 3 * n))
        np.testing.assert_allclose(vectors, vectors_ref, rtol=0, atol=1e-11)
