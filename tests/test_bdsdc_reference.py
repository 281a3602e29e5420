"""benchmarks/bdsdc_reference.py (groundwork for issue 34) stays faithful to the LAPACK that
JAX runs: its dlasd4 equals OpenBLAS's bitwise, its dbdsdc gives OpenBLAS's singular values
and the signs of its U columns and VT rows."""

import numpy as np
import pytest

from benchmarks import bdsdc_reference as ref


def test_dlasd4_bitwise_equal_to_openblas():
    rng = np.random.default_rng(0)
    for _ in range(20):
        k = int(rng.integers(1, 25))
        d = np.sort(np.abs(rng.normal(size=k)))
        d[0] = 0.0  # dlasd3's first pole is the new row's zero
        z = rng.normal(size=k)
        z /= np.linalg.norm(z)
        rho = float(abs(rng.normal()) + 0.1)
        for i in range(1, k + 1):
            delta_ref, sigma_ref, work_ref = ref.openblas_dlasd4(k, i, d, z, rho)
            delta, sigma, work = ref.dlasd4(k, i, d, z, rho)
            assert sigma == sigma_ref, (k, i)
            assert np.array_equal(delta, delta_ref) and np.array_equal(work, work_ref), (k, i)


@pytest.mark.parametrize("family", ["gaussian", "gebrd", "clustered", "repeated"])
def test_dbdsdc_signs_and_values_match_openblas(family):
    rng = np.random.default_rng(1)
    for n in (26, 53):
        d, e = ref.family(family, n, rng)
        s_ref, u_ref, vt_ref = ref.openblas_dbdsdc(d, e)
        s, u, vt = ref.dbdsdc(d, e)
        assert np.all(np.sum(u * u_ref, axis=0) > 0.5), n
        assert np.all(np.sum(vt * vt_ref, axis=1) > 0.5), n
        np.testing.assert_allclose(s, s_ref, rtol=0, atol=4e-15 * max(1.0, 3 * n))
        np.testing.assert_allclose(u, u_ref, rtol=0, atol=1e-9)
        np.testing.assert_allclose(vt, vt_ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("n", [30, 58])
def test_kept_left_vectors_are_negative_on_the_centre_row(n):
    """The sign rule of the design note: at the top merge's centre row ic, OpenBLAS's U has a
    negative entry in exactly the k columns the merge kept and 0 in the deflated ones."""
    rng = np.random.default_rng(2)
    d, e = ref.family("gaussian", n, rng)
    _, u_ref, _ = ref.openblas_dbdsdc(d, e)
    ref.MERGES.clear()
    ref.dbdsdc(d, e)
    _, kept = ref.MERGES[-1]
    centre = ref.dlasdt(n, ref.SMLSIZ)[1][0]
    row = u_ref[centre - 1]
    assert np.sum(row < 0) == kept and np.sum(row == 0) == n - kept
