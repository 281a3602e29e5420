"""A numpy transliteration of LAPACK's ``dstedc`` (COMPZ = 'I'), checked against OpenBLAS's.

Groundwork for issue 34 (``eigh`` vectors with JAX's signs above 25 rows). JAX's CPU ``eigh`` is
``syevd``; for n > 25 its tridiagonal step is ``dstedc``'s divide and conquer, not ``steqr``.
This module follows the reference Fortran routine by routine (written from its semantics, 0-based
indices inside, 1-based values where LAPACK stores them in index arrays):

- ``dstedc``: split at negligible ``e`` (``|e_i| <= eps sqrt|d_i| sqrt|d_i+1|``), scale a block
  above SMLSIZ = 25 by its max-abs entry, ``dlaed0`` on it, scale back; blocks of at most 25
  rows go to ``dsteqr``; a final selection sort of the eigenvalues with column swaps.
- ``dlaed0``: halve the sizes (``s // 2``, ``(s + 1) // 2``) until the last is <= 25, subtract
  ``|e|`` at each cut from the two diagonal entries around it, ``dsteqr`` on the leaves, then
  merge pairs level by level with ``dlaed1``; finally permute by ``indxq``.
- ``dlaed1``: ``z`` = last row of the first half's vectors, first row of the second's;
  ``dlaed2`` (deflation), ``dlaed3`` (secular equation), ``dlamrg`` (the new sorting index).
- ``dlaed2``/``dlaed3``/``dlaed4``/``dlaed5``/``dlaed6``/``dlamrg``/``dlapy2`` as in LAPACK.

The leaves use OpenBLAS's own ``dsteqr`` (our ONNX ``steqr`` port in
``jax2onnx_nn/core/lowerings/lapack/syevd.py`` reproduces it); ``dlaed4`` is ported here and can
be swapped for OpenBLAS's (``secular="openblas"``) to tell merge errors from secular-equation
errors. OpenBLAS's routines are reached through ``scipy.linalg.cython_lapack``'s function
pointers (scipy's wheel bundles the same OpenBLAS build as jaxlib's LAPACK kernels), since
``scipy.linalg.lapack`` wraps neither ``dstedc`` nor ``dsteqr``.

Run ``python3 -m benchmarks.dstedc_reference`` for the per-n table (sign agreement and max
error against OpenBLAS's ``dstedc``).

Results (2026-12-06, OpenBLAS 0.3.30 from scipy 1.17.1; ``jnp.linalg.eigh`` equals scipy's
``eigh(driver="evd")`` bitwise on 15 of 15 float64 matrices at n = 26, 40, 64)
-----------------------------------------------------------------------------------------

Families (20 tridiagonals each per n, n = 26..64, 2340 in all): ``gaussian`` (d, e ~ N(0, 1)),
``sytrd`` (``dsytrd`` of issue 34's diagonal 3, 6, 9, ... plus tanh/sin perturbation),
``clustered`` (d integers in -3..3, e ~ 1e-6 N(0, 1): 80-90% of the merge entries deflate).

- ``python3 -m benchmarks.dstedc_reference --count 20``: eigenvector signs equal OpenBLAS's
  ``dstedc`` in 2340 / 2340 (every n: 60 / 60); eigenvalues bitwise for n <= 50, within
  1.1e-13 absolute (1 ulp of |w| ~ 190) above; vectors within 2.3e-12 (n = 64, gaussian: close
  eigenvalues), 4.4e-16 for n <= 50; 343 / 2340 bitwise (numpy's GEMM/norm summation order).
- ``... --count 20 --openblas-blas`` (OpenBLAS's own dgemm, dnrm2, drot through
  ``scipy.linalg.cython_blas``): 2336 / 2340 bitwise (values and vectors), the other 4 within
  1.1e-16 (n = 27, 46, 62, 64), signs 2340 / 2340: the merge logic is LAPACK's to the bit.
- ``dlaed4`` alone: bitwise equal to OpenBLAS's on 5919 / 5919 random calls (k = 1..39).
- LAPACK master differs from OpenBLAS 0.3.30 (``LAPACK_MASTER``): with master's 64 eps
  deflation tolerance, gaussian n = 64 deflated 5 entries where OpenBLAS deflates 3, and a
  column came out with the other sign; the graph must follow the LAPACK that jaxlib uses
  (scipy's OpenBLAS: 8 eps), and note that a later OpenBLAS (with LAPACK >= 3.13) changes it.
- ``... --count 5 --leaves port --openblas-blas`` (leaves from our lowering's ``steqr``): signs
  472 / 585 (gaussian + sytrd 389 / 390, clustered 83 / 195). Both causes are in the leaves: (a)
  ``clustered`` tridiagonals are ill-conditioned: repeated diagonal values coupled only through
  second-order terms give eigenvalue pairs a few ulp apart whose vectors are set by rounding (d
  = [2, 3, 2], e = [1.09e-7, -7.57e-8]: a pair 6e-15 apart; OpenBLAS's ``dsteqr`` gives columns
  (0.827, 0, -0.562), (0.562, 0, 0.827), our port (-0.820, 0, 0.572), (0.572, 0, 0.820),
  eigenvalues bitwise equal), issue 34's "tie that no faithful graph can reproduce" case,
  already present at n <= 25; (b) gaussian n = 44: the port's leaf values differ from
  ``dsteqr``'s by ~2e-15 and one ``rho |z_i| <= tol`` decision flips (k = 44 instead of 43), so
  a deflated (leaf) vector is replaced by a secular one of the other sign. Gaussian and
  ``sytrd`` matrices otherwise match: the leaves must be ``dsteqr``-faithful to near the bit,
  and a deflation test within rounding of its threshold is a documented limit.

Design note: the merge as an ONNX graph for a static n
======================================================

Everything above the leaves is a fixed tree for a static n: the cut points, leaf sizes and
the merge order depend only on n (``dlaed0``), so the graph unrolls the levels (two levels
for n <= 100, e.g. 26 = 13 + 13, 64 = 32 + 32 -> 16 x 4) and batches the merges of one level.
Only ``dstedc``'s initial split at negligible ``e`` is data-dependent; it is rare (an exactly
zero or eps-small off-diagonal entry) and can be handled as in the ``steqr`` port (blocks
fixed before the merge: a block boundary makes ``rho = 0`` at that cut, which ``dlaed2``
deflates completely, so a masked ``rho`` reproduces the values but not the block-wise scaling;
the first version should document that case).

One merge of size m = n1 + n2 with the data-dependent deflation becomes, over static m:

1. ``z`` = two row slices of the block vectors; ``dlambda`` order: ``dlamrg`` of two sorted
   lists is a stable sort of ``d[indxq]`` (ties: first list first), i.e. an ArgSort-free
   rank computation (``rank_i = #{j: d_j < d_i} + ties before``) followed by a scatter or a
   one-hot MatMul: ``indx`` is a permutation tensor of static length m.
2. Deflation by small ``z``: a mask ``rho |z| <= tol``. Deflation of close pairs is a
   sequential scan over the sorted order (``pj`` carries the last kept index, each pair
   rotation changes ``d[pj]`` and ``z[nj]``, which the next test reads): a ``Loop`` (or an
   unrolled chain) of m steps, each a masked Givens rotation of two columns picked by
   one-hot vectors, is exact and cheap (m <= 64). The deflated list ``indxp`` with its
   insertion sort is again a rank computation over the mask (a sort key
   ``(deflated, -d for deflated / order for kept)``) -> one permutation.
3. ``coltyp`` / ``ctot``'s reordering only groups columns to save flops in the two GEMMs of
   ``dlaed3``; a graph can skip it: the result ``Q_sub @ U`` is the same product (up to
   summation order: bitwise equality is lost there anyway, GEMM kernels differ) with the
   zero blocks present. Keep k dynamic as a mask: non-deflated entries first (by the
   permutation), the rest masked.
4. ``dlaed4`` for all j at once: every root's iteration is elementwise over j with reductions
   over i (psi/phi are masked sums over i < ii and i > ii of ``z_i^2 / delta_ij``), so a
   fixed number of vectorised iterations (LAPACK's MAXIT = 30 bound; in practice 2-5 for
   well separated poles) over an ``[m, m]`` ``delta`` tensor, with per-root ``where`` for the
   branches (``orgati``, ``swtch3``, ``swtch``, the bisection fallback) and a ``done`` mask
   freezing converged roots (LAPACK stops each root at its own convergence test, so a
   frozen root keeps exactly LAPACK's value). ``dlaed6``'s inner iteration is likewise a
   fixed number of masked steps (MAXIT 40; converges in a few). Roots of masked (deflated)
   entries are computed on padding and dropped; the sums must exclude them (mask * z = 0
   already does, as deflated z are 0 after ``dlaed2`` except that they are moved out: use
   the mask, not zeros, so k-sized special cases ``k = 1`` (``delta = 1``) and ``k = 2``
   (``dlaed5``) are selected with ``where`` on k).
5. ``dlaed3``'s Gu-Eisenstat ``w``: products over i != j of ``delta_ij / (dlambda_i -
   dlambda_j)`` are a ReduceProd over a masked [k, k] tensor (mask the diagonal and the
   deflated rows/columns to 1), then ``sign(sqrt(-w), z)``; the vectors ``w_i / delta_ij``
   normalised, rows permuted back by ``indxc``; then the block GEMM.
6. The merged order for the next level (``dlamrg(k, m - k, d, 1, -1)``: kept ascending,
   deflated descending) is one more rank computation.

What decides the signs: a non-deflated merged vector is ``Q_sub u`` with ``u_i = w_i /
(dlambda_i - lambda_j)`` and ``sign(w_i) = sign(z_i)`` where ``z`` is built from ``Q_sub``'s own
rows: flipping a sub-vector flips both its column and ``z_i``, so these vectors do not depend
on the leaves' signs at all. Their sign is fixed by the formula itself (the sign of ``z``,
i.e. of the off-diagonal ``rho`` through ``dlaed2``'s negation of the second half of ``z``
when ``rho < 0``, and the ordering of the poles). A deflated vector is a leaf (or lower-level)
vector, possibly rotated by ``dlaed2``'s Givens pair, so it carries ``dsteqr``'s sign (which
our port reproduces). Checked: flipping the leaves' vector signs at random (gaussian, n = 26..64,
5 each) leaves every final sign unchanged in the 110 runs without deflation; 14 of the 85 runs
with a deflation change. Hence signs are robust: they only go wrong where a deflation decision
(``rho |z_i| <= tol`` or ``|t c s| <= tol``) falls on the other side of its threshold, which
needs values within rounding of the threshold.
"""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.linalg.cython_blas as _cython_blas
import scipy.linalg.cython_lapack as _cython_lapack

SMLSIZ = 25
EPS = 2.0**-53  # dlamch('Epsilon'): half the spacing at 1 (rounding mode)
SAFMIN = float(np.finfo(np.float64).tiny)
# OpenBLAS 0.3.30 (scipy's and jaxlib's LAPACK) predates two changes of LAPACK's master:
# dlaed2's deflation tolerance 8 eps -> 64 eps (9e64af628, 2026-06) and dlaed4's overshoot
# fallback taking the geometric mean of the Newton step and the bisection step (b6b628808,
# 2026-02). False follows OpenBLAS 0.3.30 (what JAX runs); True follows LAPACK master.
LAPACK_MASTER = False

# ---------------------------------------------------------------------------------------------
# OpenBLAS's routines through scipy's function pointers (the references)

_f64p = ctypes.POINTER(ctypes.c_double)
_intp = ctypes.POINTER(ctypes.c_int)


def _lapack_fn(name: str, *argtypes: Any, restype: Any = None) -> Callable[..., Any]:
    module = _cython_blas if name in ("dgemm", "dnrm2", "drot") else _cython_lapack
    capsule = module.__pyx_capi__[name]  # type: ignore[attr-defined]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype = ctypes.c_void_p
    get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get_ptr(capsule, get_name(capsule))
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def _ptr(a: np.ndarray) -> object:
    return a.ctypes.data_as(_f64p)


def _int(v: int) -> object:
    return ctypes.byref(ctypes.c_int(v))


_DSTEDC = _lapack_fn(
    "dstedc", ctypes.c_char_p, _intp, _f64p, _f64p, _f64p, _intp, _f64p, _intp, _intp, _intp,
    _intp, ctypes.c_size_t,
)  # fmt: skip
_DSTEQR = _lapack_fn(
    "dsteqr", ctypes.c_char_p, _intp, _f64p, _f64p, _f64p, _intp, _f64p, _intp, ctypes.c_size_t
)
_DGEMM = _lapack_fn(
    "dgemm", ctypes.c_char_p, ctypes.c_char_p, _intp, _intp, _intp, _f64p, _f64p, _intp, _f64p,
    _intp, _f64p, _f64p, _intp, ctypes.c_size_t, ctypes.c_size_t,
)  # fmt: skip
_DNRM2 = _lapack_fn("dnrm2", _intp, _f64p, _intp, restype=ctypes.c_double)
_DROT = _lapack_fn("drot", _intp, _f64p, _intp, _f64p, _intp, _f64p, _f64p)
# True: dnrm2, dgemm and drot are OpenBLAS's own kernels (to tell their summation order from
# the rest); False: numpy's
OPENBLAS_BLAS = False
_DLAED4 = _lapack_fn("dlaed4", _intp, _intp, _f64p, _f64p, _f64p, _f64p, _f64p, _intp)


def openblas_dstedc(d: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OpenBLAS's dstedc('I', ...): (eigenvalues ascending, eigenvectors as columns)."""
    n = d.shape[0]
    d = np.array(d, np.float64)
    e = np.array(np.append(e, 0.0), np.float64)
    z = np.zeros((n, n), np.float64, order="F")
    lwork, liwork = 1 + 4 * n + n * n, 3 + 5 * n
    work = np.zeros(max(lwork, 2 * n), np.float64)
    iwork = np.zeros(liwork, np.int32)
    info = ctypes.c_int(0)
    _DSTEDC(
        b"I", _int(n), _ptr(d), _ptr(e), _ptr(z), _int(n), _ptr(work), _int(work.size),
        iwork.ctypes.data_as(_intp), _int(liwork), ctypes.byref(info), 1,
    )  # fmt: skip
    assert info.value == 0, info.value
    return d, np.array(z)


def openblas_dsteqr(d: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OpenBLAS's dsteqr('I', ...) (the leaves)."""
    n = d.shape[0]
    d = np.array(d, np.float64)
    e = np.array(np.append(e, 0.0), np.float64)
    z = np.zeros((n, n), np.float64, order="F")
    work = np.zeros(max(1, 2 * n - 2), np.float64)
    info = ctypes.c_int(0)
    _DSTEQR(b"I", _int(n), _ptr(d), _ptr(e), _ptr(z), _int(n), _ptr(work), ctypes.byref(info), 1)
    assert info.value == 0, info.value
    return d, np.array(z)


def openblas_dlaed4(
    k: int, i: int, dlambda: np.ndarray, w: np.ndarray, rho: float
) -> tuple[np.ndarray, float]:
    """OpenBLAS's dlaed4 for root i (1-based): (delta, lambda_i)."""
    dl = np.ascontiguousarray(dlambda[:k], np.float64)
    ww = np.ascontiguousarray(w[:k], np.float64)
    delta = np.zeros(k, np.float64)
    lam = ctypes.c_double(0.0)
    info = ctypes.c_int(0)
    r = ctypes.c_double(rho)
    _DLAED4(
        _int(k), _int(i), _ptr(dl), _ptr(ww), _ptr(delta), ctypes.byref(r), ctypes.byref(lam),
        ctypes.byref(info),
    )  # fmt: skip
    assert info.value == 0, info.value
    return delta, lam.value


# ---------------------------------------------------------------------------------------------
# BLAS-level helpers


def dlapy2(x: float, y: float) -> float:
    """sqrt(x^2 + y^2) without overflow, as LAPACK's dlapy2."""
    xa, ya = abs(x), abs(y)
    w, z = max(xa, ya), min(xa, ya)
    if z == 0.0:
        return w
    return w * math.sqrt(1.0 + (z / w) ** 2)


def idamax(x: np.ndarray) -> int:
    """0-based index of the first entry of largest magnitude."""
    return int(np.argmax(np.abs(x)))


def dlamrg(n1: int, n2: int, a: np.ndarray, s1: int, s2: int) -> np.ndarray:
    """Merge two sorted runs of ``a`` (strides s1, s2 = +-1): 1-based index, ascending."""
    ind1 = 1 if s1 > 0 else n1
    ind2 = 1 + n1 if s2 > 0 else n1 + n2
    out: list[int] = []
    while n1 > 0 and n2 > 0:
        if a[ind1 - 1] <= a[ind2 - 1]:
            out.append(ind1)
            ind1 += s1
            n1 -= 1
        else:
            out.append(ind2)
            ind2 += s2
            n2 -= 1
    for _ in range(n2):
        out.append(ind2)
        ind2 += s2
    for _ in range(n1):
        out.append(ind1)
        ind1 += s1
    return np.array(out, np.int64)


def fsign(x: float, y: float) -> float:
    """Fortran SIGN(x, y)."""
    return abs(x) if y >= 0 else -abs(x)


# ---------------------------------------------------------------------------------------------
# the secular equation: dlaed5, dlaed6, dlaed4 (1-based i as in LAPACK)


def dlaed5(i: int, d: np.ndarray, z: np.ndarray, rho: float) -> tuple[np.ndarray, float]:
    """Root i of the 2x2 secular equation; delta is the normalised eigenvector."""
    d1, d2 = float(d[0]), float(d[1])
    z1, z2 = float(z[0]), float(z[1])
    dl = d2 - d1
    if i == 1:
        w = 1.0 + 2.0 * rho * (z2 * z2 - z1 * z1) / dl
        if w > 0.0:
            b = dl + rho * (z1 * z1 + z2 * z2)
            c = rho * z1 * z1 * dl
            tau = 2.0 * c / (b + math.sqrt(abs(b * b - 4.0 * c)))
            lam = d1 + tau
            x1, x2 = -z1 / tau, z2 / (dl - tau)
        else:
            b = -dl + rho * (z1 * z1 + z2 * z2)
            c = rho * z2 * z2 * dl
            if b > 0.0:
                tau = -2.0 * c / (b + math.sqrt(b * b + 4.0 * c))
            else:
                tau = (b - math.sqrt(b * b + 4.0 * c)) / 2.0
            lam = d2 + tau
            x1, x2 = -z1 / (dl + tau), -z2 / tau
    else:
        b = -dl + rho * (z1 * z1 + z2 * z2)
        c = rho * z2 * z2 * dl
        if b > 0.0:
            tau = (b + math.sqrt(b * b + 4.0 * c)) / 2.0
        else:
            tau = 2.0 * c / (-b + math.sqrt(b * b + 4.0 * c))
        lam = d2 + tau
        x1, x2 = -z1 / (dl + tau), -z2 / tau
    temp = math.sqrt(x1 * x1 + x2 * x2)
    return np.array([x1 / temp, x2 / temp]), lam


_SMALL1 = 2.0 ** int(math.log(SAFMIN) / math.log(2.0) / 3.0)


def dlaed6(
    kniter: int, orgati: bool, rho: float, d: np.ndarray, z: np.ndarray, finit: float
) -> float:
    """The root tau of rho + sum z_i / (d_i - x) = 0 nearest the poles that dlaed4 names."""
    d = [float(v) for v in d]  # type: ignore[assignment]
    z = [float(v) for v in z]  # type: ignore[assignment]
    if orgati:
        lbd, ubd = d[1], d[2]
    else:
        lbd, ubd = d[0], d[1]
    if finit < 0.0:
        lbd = 0.0
    else:
        ubd = 0.0
    tau = 0.0
    if kniter == 2:
        if orgati:
            temp = (d[2] - d[1]) / 2.0
            c = rho + z[0] / ((d[0] - d[1]) - temp)
            a = c * (d[1] + d[2]) + z[1] + z[2]
            b = c * d[1] * d[2] + z[1] * d[2] + z[2] * d[1]
        else:
            temp = (d[0] - d[1]) / 2.0
            c = rho + z[2] / ((d[2] - d[1]) - temp)
            a = c * (d[0] + d[1]) + z[0] + z[1]
            b = c * d[0] * d[1] + z[0] * d[1] + z[1] * d[0]
        temp = max(abs(a), abs(b), abs(c))
        a, b, c = a / temp, b / temp, c / temp
        if c == 0.0:
            tau = b / a
        elif a <= 0.0:
            tau = (a - math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
        else:
            tau = 2.0 * b / (a + math.sqrt(abs(a * a - 4.0 * b * c)))
        if tau < lbd or tau > ubd:
            tau = (lbd + ubd) / 2.0
        if d[0] == tau or d[1] == tau or d[2] == tau:
            tau = 0.0
        else:
            temp = (
                finit
                + tau * z[0] / (d[0] * (d[0] - tau))
                + tau * z[1] / (d[1] * (d[1] - tau))
                + tau * z[2] / (d[2] * (d[2] - tau))
            )
            if temp <= 0.0:
                lbd = tau
            else:
                ubd = tau
            if abs(finit) <= abs(temp):
                tau = 0.0
    small1 = _SMALL1
    sminv1 = 1.0 / small1
    small2, sminv2 = small1 * small1, sminv1 * sminv1
    if orgati:
        temp = min(abs(d[1] - tau), abs(d[2] - tau))
    else:
        temp = min(abs(d[0] - tau), abs(d[1] - tau))
    scale = temp <= small1
    sclinv = 1.0
    if scale:
        sclfac, sclinv = (sminv2, small2) if temp <= small2 else (sminv1, small1)
        ds = [v * sclfac for v in d]
        zs = [v * sclfac for v in z]
        tau, lbd, ubd = tau * sclfac, lbd * sclfac, ubd * sclfac
    else:
        ds, zs = list(d), list(z)
    fc = df = ddf = 0.0
    for i in range(3):
        temp = 1.0 / (ds[i] - tau)
        temp1 = zs[i] * temp
        temp2 = temp1 * temp
        temp3 = temp2 * temp
        fc = fc + temp1 / ds[i]
        df = df + temp2
        ddf = ddf + temp3
    f = finit + tau * fc
    if abs(f) > 0.0:
        if f <= 0.0:
            lbd = tau
        else:
            ubd = tau
        for _ in range(2, 41):  # NITER = 2 .. MAXIT (40)
            if orgati:
                temp1, temp2 = ds[1] - tau, ds[2] - tau
            else:
                temp1, temp2 = ds[0] - tau, ds[1] - tau
            a = (temp1 + temp2) * f - temp1 * temp2 * df
            b = temp1 * temp2 * f
            c = f - (temp1 + temp2) * df + temp1 * temp2 * ddf
            temp = max(abs(a), abs(b), abs(c))
            a, b, c = a / temp, b / temp, c / temp
            if c == 0.0:
                eta = b / a
            elif a <= 0.0:
                eta = (a - math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
            else:
                eta = 2.0 * b / (a + math.sqrt(abs(a * a - 4.0 * b * c)))
            if f * eta >= 0.0:
                eta = -f / df
            tau = tau + eta
            if tau < lbd or tau > ubd:
                tau = (lbd + ubd) / 2.0
            fc = erretm = df = ddf = 0.0
            hit_pole = False
            for i in range(3):
                if ds[i] - tau != 0.0:
                    temp = 1.0 / (ds[i] - tau)
                    temp1 = zs[i] * temp
                    temp2 = temp1 * temp
                    temp3 = temp2 * temp
                    temp4 = temp1 / ds[i]
                    fc = fc + temp4
                    erretm = erretm + abs(temp4)
                    df = df + temp2
                    ddf = ddf + temp3
                else:
                    hit_pole = True
                    break
            if hit_pole:
                break
            f = finit + tau * fc
            erretm = 8.0 * (abs(finit) + abs(tau) * erretm) + abs(tau) * df
            if abs(f) <= 4.0 * EPS * erretm or (ubd - lbd) <= 4.0 * EPS * abs(tau):
                break
            if f <= 0.0:
                lbd = tau
            else:
                ubd = tau
        else:
            raise RuntimeError("dlaed6 did not converge")
    if scale:
        tau = tau * sclinv
    return tau


def _sums(z: list[float], delta: list[float], lo: int, hi: int) -> tuple[float, float, float]:
    """psi, dpsi, erretm over 0-based j = lo .. hi - 1 (ascending), as dlaed4's loops."""
    psi = dpsi = erretm = 0.0
    for j in range(lo, hi):
        temp = z[j] / delta[j]
        psi = psi + z[j] * temp
        dpsi = dpsi + temp * temp
        erretm = erretm + psi
    return psi, dpsi, erretm


def _sums_down(
    z: list[float], delta: list[float], hi: int, lo: int, erretm: float
) -> tuple[float, float, float]:
    """phi, dphi, erretm over 0-based j = hi - 1 down to lo, continuing erretm."""
    phi = dphi = 0.0
    for j in range(hi - 1, lo - 1, -1):
        temp = z[j] / delta[j]
        phi = phi + z[j] * temp
        dphi = dphi + temp * temp
        erretm = erretm + phi
    return phi, dphi, erretm


def dlaed4(n: int, i: int, dd: np.ndarray, zz: np.ndarray, rho: float) -> tuple[np.ndarray, float]:
    """Root i (1-based) of 1 + rho sum z_j^2 / (d_j - x) = 0 and delta_j = d_j - lambda_i."""
    d = [float(v) for v in dd[:n]]
    z = [float(v) for v in zz[:n]]
    if n == 1:
        return np.array([1.0]), d[0] + rho * z[0] * z[0]
    if n == 2:
        return dlaed5(i, dd, zz, rho)
    eps = EPS
    rhoinv = 1.0 / rho
    if i == n:  # the last root, beyond d[n-1]
        ii = n - 1  # 1-based ii, as II = N - 1
        midpt = rho / 2.0
        delta = [(d[j] - d[n - 1]) - midpt for j in range(n)]
        psi = 0.0
        for j in range(n - 2):
            psi = psi + z[j] * z[j] / delta[j]
        c = rhoinv + psi
        w = c + z[ii - 1] * z[ii - 1] / delta[ii - 1] + z[n - 1] * z[n - 1] / delta[n - 1]
        if w <= 0.0:
            temp = z[n - 2] * z[n - 2] / (d[n - 1] - d[n - 2] + rho) + z[n - 1] * z[n - 1] / rho
            if c <= temp:
                tau = rho
            else:
                dl = d[n - 1] - d[n - 2]
                a = -c * dl + z[n - 2] * z[n - 2] + z[n - 1] * z[n - 1]
                b = z[n - 1] * z[n - 1] * dl
                if a < 0.0:
                    tau = 2.0 * b / (math.sqrt(a * a + 4.0 * b * c) - a)
                else:
                    tau = (a + math.sqrt(a * a + 4.0 * b * c)) / (2.0 * c)
            dltlb, dltub = midpt, rho
        else:
            dl = d[n - 1] - d[n - 2]
            a = -c * dl + z[n - 2] * z[n - 2] + z[n - 1] * z[n - 1]
            b = z[n - 1] * z[n - 1] * dl
            if a < 0.0:
                tau = 2.0 * b / (math.sqrt(a * a + 4.0 * b * c) - a)
            else:
                tau = (a + math.sqrt(a * a + 4.0 * b * c)) / (2.0 * c)
            dltlb, dltub = 0.0, midpt
        delta = [(d[j] - d[n - 1]) - tau for j in range(n)]

        def evaluate() -> tuple[float, float, float, float, float]:
            """psi, dpsi, phi, dphi, erretm at the current tau and delta."""
            psi, dpsi, erretm = _sums(z, delta, 0, ii)
            erretm = abs(erretm)
            temp = z[n - 1] / delta[n - 1]
            phi = z[n - 1] * temp
            dphi = temp * temp
            erretm = 8.0 * (-phi - psi) + erretm - phi + rhoinv + abs(tau) * (dpsi + dphi)
            return psi, dpsi, phi, dphi, erretm

        psi, dpsi, phi, dphi, erretm = evaluate()
        w = rhoinv + phi + psi
        if abs(w) <= eps * erretm:
            return np.array(delta), d[n - 1] + tau
        if w <= 0.0:
            dltlb = max(dltlb, tau)
        else:
            dltub = min(dltub, tau)
        c = w - delta[n - 2] * dpsi - delta[n - 1] * dphi
        a = (delta[n - 2] + delta[n - 1]) * w - delta[n - 2] * delta[n - 1] * (dpsi + dphi)
        b = delta[n - 2] * delta[n - 1] * w
        if c < 0.0:
            c = abs(c)
        if c == 0.0:
            eta = -w / (dpsi + dphi)
        elif a >= 0.0:
            eta = (a + math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
        else:
            eta = 2.0 * b / (a - math.sqrt(abs(a * a - 4.0 * b * c)))
        if w * eta > 0.0:
            eta = -w / (dpsi + dphi)
        temp = tau + eta
        if temp > dltub or temp < dltlb:
            eta1 = -w / (dpsi + dphi)
            temp = tau + eta1
            eta2 = (dltub - tau) / 2.0 if w < 0.0 else (dltlb - tau) / 2.0
            if LAPACK_MASTER and dltlb <= temp <= dltub:
                eta = fsign(1.0, eta1) * math.sqrt(abs(eta1)) * math.sqrt(abs(eta2))
            else:
                eta = eta2
        delta = [v - eta for v in delta]
        tau = tau + eta
        psi, dpsi, phi, dphi, erretm = evaluate()
        w = rhoinv + phi + psi
        for _ in range(3, 31):  # NITER = 3 .. MAXIT
            if abs(w) <= eps * erretm:
                return np.array(delta), d[n - 1] + tau
            if w <= 0.0:
                dltlb = max(dltlb, tau)
            else:
                dltub = min(dltub, tau)
            c = w - delta[n - 2] * dpsi - delta[n - 1] * dphi
            a = (delta[n - 2] + delta[n - 1]) * w - delta[n - 2] * delta[n - 1] * (dpsi + dphi)
            b = delta[n - 2] * delta[n - 1] * w
            if a >= 0.0:
                eta = (a + math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
            else:
                eta = 2.0 * b / (a - math.sqrt(abs(a * a - 4.0 * b * c)))
            if w * eta > 0.0:
                eta = -w / (dpsi + dphi)
            temp = tau + eta
            if temp > dltub or temp < dltlb:
                eta = (dltub - tau) / 2.0 if w < 0.0 else (dltlb - tau) / 2.0
            delta = [v - eta for v in delta]
            tau = tau + eta
            psi, dpsi, phi, dphi, erretm = evaluate()
            w = rhoinv + phi + psi
        raise RuntimeError("dlaed4 did not converge (last root)")

    # roots strictly between d[i-1] and d[i] (1-based i, ip1)
    ip1 = i + 1
    dl = d[ip1 - 1] - d[i - 1]
    midpt = dl / 2.0
    delta = [(d[j] - d[i - 1]) - midpt for j in range(n)]
    psi = 0.0
    for j in range(i - 1):
        psi = psi + z[j] * z[j] / delta[j]
    phi = 0.0
    for j in range(n - 1, i, -1):
        phi = phi + z[j] * z[j] / delta[j]
    c = rhoinv + psi + phi
    zi, zp = z[i - 1], z[ip1 - 1]
    w = c + zi * zi / delta[i - 1] + zp * zp / delta[ip1 - 1]
    if w > 0.0:
        orgati = True
        a = c * dl + zi * zi + zp * zp
        b = zi * zi * dl
        if a > 0.0:
            tau = 2.0 * b / (a + math.sqrt(abs(a * a - 4.0 * b * c)))
        else:
            tau = (a - math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
        dltlb, dltub = 0.0, midpt
    else:
        orgati = False
        a = c * dl - zi * zi - zp * zp
        b = zp * zp * dl
        if a < 0.0:
            tau = 2.0 * b / (a - math.sqrt(abs(a * a + 4.0 * b * c)))
        else:
            tau = -(a + math.sqrt(abs(a * a + 4.0 * b * c))) / (2.0 * c)
        dltlb, dltub = -midpt, 0.0
    origin = d[i - 1] if orgati else d[ip1 - 1]
    delta = [(d[j] - origin) - tau for j in range(n)]
    ii = i if orgati else i + 1  # 1-based
    iim1, iip1 = ii - 1, ii + 1

    def evaluate2(tau_for_err: float) -> tuple[float, float, float, float, float, float, float]:
        psi, dpsi, erretm = _sums(z, delta, 0, iim1)
        erretm = abs(erretm)
        phi, dphi, erretm = _sums_down(z, delta, n, iip1 - 1, erretm)
        temp = z[ii - 1] / delta[ii - 1]
        dw = dpsi + dphi + temp * temp
        temp = z[ii - 1] * temp
        w = rhoinv + phi + psi + temp
        erretm = 8.0 * (phi - psi) + erretm + 2.0 * rhoinv + 3.0 * abs(temp) + abs(tau_for_err) * dw
        return psi, dpsi, phi, dphi, dw, w, erretm

    # the first evaluation: W = RHOINV + PHI + PSI, then W = W + TEMP (same sum order)
    psi, dpsi, phi, dphi, dw, w, erretm = evaluate2(tau)
    w0 = rhoinv + phi + psi
    swtch3 = (w0 < 0.0) if orgati else (w0 > 0.0)
    if ii == 1 or ii == n:
        swtch3 = False
    if abs(w) <= eps * erretm:
        return np.array(delta), origin + tau
    if w <= 0.0:
        dltlb = max(dltlb, tau)
    else:
        dltub = min(dltub, tau)
    niter = 2

    def step_eta(swtch: bool, first: bool) -> float:
        """The correction eta of one iteration (updates dpsi/dphi in the swtch case)."""
        nonlocal dpsi, dphi
        if not swtch3:
            if first or not swtch:
                if orgati:
                    c = w - delta[ip1 - 1] * dw - (d[i - 1] - d[ip1 - 1]) * (zi / delta[i - 1]) ** 2
                else:
                    c = w - delta[i - 1] * dw - (d[ip1 - 1] - d[i - 1]) * (zp / delta[ip1 - 1]) ** 2
            else:
                temp = z[ii - 1] / delta[ii - 1]
                if orgati:
                    dpsi = dpsi + temp * temp
                else:
                    dphi = dphi + temp * temp
                c = w - delta[i - 1] * dpsi - delta[ip1 - 1] * dphi
            a = (delta[i - 1] + delta[ip1 - 1]) * w - delta[i - 1] * delta[ip1 - 1] * dw
            b = delta[i - 1] * delta[ip1 - 1] * w
            if c == 0.0:
                if a == 0.0:
                    if first or not swtch:
                        if orgati:
                            a = zi * zi + delta[ip1 - 1] * delta[ip1 - 1] * (dpsi + dphi)
                        else:
                            a = zp * zp + delta[i - 1] * delta[i - 1] * (dpsi + dphi)
                    else:
                        a = (
                            delta[i - 1] * delta[i - 1] * dpsi
                            + delta[ip1 - 1] * delta[ip1 - 1] * dphi
                        )
                return b / a
            if a <= 0.0:
                return (a - math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
            return 2.0 * b / (a + math.sqrt(abs(a * a - 4.0 * b * c)))
        temp = rhoinv + psi + phi
        zz = [0.0, z[ii - 1] * z[ii - 1], 0.0]
        if not first and swtch:
            c = temp - delta[iim1 - 1] * dpsi - delta[iip1 - 1] * dphi
            zz[0] = delta[iim1 - 1] * delta[iim1 - 1] * dpsi
            zz[2] = delta[iip1 - 1] * delta[iip1 - 1] * dphi
        elif orgati:
            temp1 = z[iim1 - 1] / delta[iim1 - 1]
            temp1 = temp1 * temp1
            c = temp - delta[iip1 - 1] * (dpsi + dphi) - (d[iim1 - 1] - d[iip1 - 1]) * temp1
            zz[0] = z[iim1 - 1] * z[iim1 - 1]
            zz[2] = delta[iip1 - 1] * delta[iip1 - 1] * ((dpsi - temp1) + dphi)
        else:
            temp1 = z[iip1 - 1] / delta[iip1 - 1]
            temp1 = temp1 * temp1
            c = temp - delta[iim1 - 1] * (dpsi + dphi) - (d[iip1 - 1] - d[iim1 - 1]) * temp1
            zz[0] = delta[iim1 - 1] * delta[iim1 - 1] * (dpsi + (dphi - temp1))
            zz[2] = z[iip1 - 1] * z[iip1 - 1]
        return dlaed6(niter, orgati, c, np.array(delta[iim1 - 1 : iip1]), np.array(zz), w)

    eta = step_eta(False, True)
    if w * eta >= 0.0:
        eta = -w / dw
    temp = tau + eta
    if temp > dltub or temp < dltlb:
        eta = (dltub - tau) / 2.0 if w < 0.0 else (dltlb - tau) / 2.0
    prew = w
    delta = [v - eta for v in delta]
    psi, dpsi, phi, dphi, dw, w, erretm = evaluate2(tau + eta)
    swtch = (-w > abs(prew) / 10.0) if orgati else (w > abs(prew) / 10.0)
    tau = tau + eta
    for step in range(3, 31):  # NITER = 3 .. MAXIT; step_eta passes it to dlaed6
        niter = step
        if abs(w) <= eps * erretm:
            return np.array(delta), origin + tau
        if w <= 0.0:
            dltlb = max(dltlb, tau)
        else:
            dltub = min(dltub, tau)
        eta = step_eta(swtch, False)
        if w * eta >= 0.0:
            eta = -w / dw
        temp = tau + eta
        if temp > dltub or temp < dltlb:
            eta1 = -w / dw
            temp = tau + eta1
            eta2 = (dltub - tau) / 2.0 if w < 0.0 else (dltlb - tau) / 2.0
            if LAPACK_MASTER and dltlb <= temp <= dltub:
                eta = fsign(1.0, eta1) * math.sqrt(abs(eta1)) * math.sqrt(abs(eta2))
            else:
                eta = eta2
        delta = [v - eta for v in delta]
        tau = tau + eta
        prew = w
        psi, dpsi, phi, dphi, dw, w, erretm = evaluate2(tau)
        if w * prew > 0.0 and abs(w) > abs(prew) / 10.0:
            swtch = not swtch
    raise RuntimeError("dlaed4 did not converge")


# ---------------------------------------------------------------------------------------------
# the merge: dlaed2 (deflation), dlaed3 (vectors), dlaed1 (one merge)

MERGES: list[tuple[int, int]] = []  # (size, kept k) of each dlaed1 call, for the statistics
Secular = Callable[[int, int, np.ndarray, np.ndarray, float], tuple[np.ndarray, float]]


def dlaed2(
    n: int, n1: int, d: np.ndarray, q: np.ndarray, indxq: np.ndarray, rho: float, z: np.ndarray
) -> tuple[int, float, np.ndarray, np.ndarray, list[np.ndarray], np.ndarray, list[int]]:
    """Deflation. Mutates d, q, indxq, z. Returns (k, rho, dlambda, w, [q2 top, q2 bottom],
    indxc, ctot); k = 0 means everything deflated (d, q already sorted)."""
    n2 = n - n1
    if rho < 0.0:
        z[n1:] = z[n1:] * -1.0
    t = 1.0 / math.sqrt(2.0)
    z[:] = z * t
    rho = abs(2.0 * rho)
    indxq[n1:] += n1
    dlambda = d[indxq - 1].copy()
    indxc = dlamrg(n1, n2, dlambda, 1, 1)
    indx = indxq[indxc - 1].copy()
    imax, jmax = idamax(z), idamax(d)
    factor = 8.0 * 8.0 if LAPACK_MASTER else 8.0
    tol = factor * EPS * max(abs(d[jmax]), abs(z[imax]))
    w = np.zeros(n)
    if rho * abs(z[imax]) <= tol:
        q[:, :] = q[:, indx - 1].copy()
        d[:] = d[indx - 1].copy()
        return 0, rho, dlambda, w, [], indxc, [0, 0, 0, 0]
    coltyp = np.array([1] * n1 + [3] * n2)  # indexed by 1-based column - 1
    indxp = np.zeros(n + 1, np.int64)  # 1-based positions
    k = 0
    k2 = n + 1
    pj = -1
    j = 1
    while j <= n:  # label 70: deflate until the first kept entry
        nj = int(indx[j - 1])
        if rho * abs(z[nj - 1]) <= tol:
            k2 -= 1
            coltyp[nj - 1] = 4
            indxp[k2] = nj
        else:
            pj = nj
            break
        j += 1
    while True:  # label 80
        j += 1
        if j > n:
            break
        nj = int(indx[j - 1])
        if rho * abs(z[nj - 1]) <= tol:
            k2 -= 1
            coltyp[nj - 1] = 4
            indxp[k2] = nj
            continue
        s = float(z[pj - 1])
        c = float(z[nj - 1])
        tau = dlapy2(c, s)
        t = float(d[nj - 1] - d[pj - 1])
        c = c / tau
        s = -s / tau
        if abs(t * c * s) <= tol:
            z[nj - 1] = tau
            z[pj - 1] = 0.0
            if coltyp[nj - 1] != coltyp[pj - 1]:
                coltyp[nj - 1] = 2
            coltyp[pj - 1] = 4
            q[:, pj - 1], q[:, nj - 1] = drot(q[:, pj - 1].copy(), q[:, nj - 1].copy(), c, s)
            t = d[pj - 1] * c**2 + d[nj - 1] * s**2
            d[nj - 1] = d[pj - 1] * s**2 + d[nj - 1] * c**2
            d[pj - 1] = t
            k2 -= 1
            i = 1
            while k2 + i <= n and d[pj - 1] < d[indxp[k2 + i] - 1]:
                indxp[k2 + i - 1] = indxp[k2 + i]
                indxp[k2 + i] = pj
                i += 1
            indxp[k2 + i - 1] = pj
        else:
            k += 1
            dlambda[k - 1] = d[pj - 1]
            w[k - 1] = z[pj - 1]
            indxp[k] = pj
        pj = nj
    k += 1  # label 100
    dlambda[k - 1] = d[pj - 1]
    w[k - 1] = z[pj - 1]
    indxp[k] = pj
    ctot = [int(np.sum(coltyp == ct)) for ct in (1, 2, 3, 4)]
    psm = [1, 1 + ctot[0], 1 + ctot[0] + ctot[1], 1 + ctot[0] + ctot[1] + ctot[2]]
    k = n - ctot[3]
    indx_new = np.zeros(n, np.int64)
    indxc = np.zeros(n, np.int64)
    for jj in range(1, n + 1):
        js = int(indxp[jj])
        ct = int(coltyp[js - 1])
        indx_new[psm[ct - 1] - 1] = js
        indxc[psm[ct - 1] - 1] = jj
        psm[ct - 1] += 1
    cols = indx_new - 1
    c1, c2, c3 = ctot[0], ctot[1], ctot[2]
    q2_top = q[:n1, cols[: c1 + c2]].copy()
    q2_bottom = q[n1:, cols[c1 : c1 + c2 + c3]].copy()
    q2_deflated = q[:, cols[c1 + c2 + c3 :]].copy()
    z[:] = d[cols]
    if k < n:
        q[:, k:] = q2_deflated
        d[k:] = z[k:]
    return k, rho, dlambda, w, [q2_top, q2_bottom], indxc, ctot


def dnrm2(x: np.ndarray) -> float:
    """Euclidean norm (OpenBLAS's kernel sums in its own order: numpy's is not bitwise)."""
    if OPENBLAS_BLAS:
        xx = np.ascontiguousarray(x, np.float64)
        return float(_DNRM2(_int(xx.size), _ptr(xx), _int(1)))
    return float(np.sqrt(np.dot(x, x)))


def dgemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b (OpenBLAS's kernel with OPENBLAS_BLAS)."""
    if not OPENBLAS_BLAS:
        return a @ b
    m, kk = a.shape
    nn = b.shape[1]
    af, bf = np.asfortranarray(a, np.float64), np.asfortranarray(b, np.float64)
    c = np.zeros((m, nn), np.float64, order="F")
    one, zero = ctypes.c_double(1.0), ctypes.c_double(0.0)
    _DGEMM(
        b"N", b"N", _int(m), _int(nn), _int(kk), ctypes.byref(one), _ptr(af), _int(max(m, 1)),
        _ptr(bf), _int(max(kk, 1)), ctypes.byref(zero), _ptr(c), _int(max(m, 1)), 1, 1,
    )  # fmt: skip
    return np.array(c)


def drot(x: np.ndarray, y: np.ndarray, c: float, s: float) -> tuple[np.ndarray, np.ndarray]:
    """(c x + s y, c y - s x) (OpenBLAS's kernel with OPENBLAS_BLAS)."""
    if not OPENBLAS_BLAS:
        return c * x + s * y, c * y - s * x
    xx, yy = np.array(x, np.float64), np.array(y, np.float64)
    cc, ss = ctypes.c_double(c), ctypes.c_double(s)
    _DROT(_int(xx.size), _ptr(xx), _int(1), _ptr(yy), _int(1), ctypes.byref(cc), ctypes.byref(ss))
    return xx, yy


def dlaed3(
    k: int,
    n: int,
    n1: int,
    d: np.ndarray,
    q: np.ndarray,
    rho: float,
    dlambda: np.ndarray,
    q2: list[np.ndarray],
    indx: np.ndarray,
    ctot: list[int],
    w: np.ndarray,
    secular: Secular,
) -> None:
    """Roots of the secular equation, Gu-Eisenstat's z, the vectors, the block products."""
    for j in range(1, k + 1):
        delta, lam = secular(k, j, dlambda, w, rho)
        q[:k, j - 1] = delta
        d[j - 1] = lam
    if k == 2:
        for j in range(2):
            w1, w2 = q[0, j], q[1, j]
            pair = (w1, w2)
            q[0, j] = pair[indx[0] - 1]
            q[1, j] = pair[indx[1] - 1]
    elif k > 2:
        s = w[:k].copy()
        ww = np.diag(q[:k, :k]).copy()
        for j in range(k):
            for i in range(k):
                if i != j:
                    ww[i] = ww[i] * (q[i, j] / (dlambda[i] - dlambda[j]))
        ww = np.array([fsign(math.sqrt(-v), sv) for v, sv in zip(ww, s, strict=True)])
        for j in range(k):
            sj = ww / q[:k, j]
            temp = dnrm2(sj)
            q[:k, j] = sj[indx[:k] - 1] / temp
    n2 = n - n1
    n12 = ctot[0] + ctot[1]
    n23 = ctot[1] + ctot[2]
    s_bottom = q[ctot[0] : ctot[0] + n23, :k].copy()
    s_top = q[:n12, :k].copy()
    q[n1:, :k] = dgemm(q2[1], s_bottom) if n23 else np.zeros((n2, k))
    q[:n1, :k] = dgemm(q2[0], s_top) if n12 else np.zeros((n1, k))


def dlaed1(
    n: int,
    d: np.ndarray,
    q: np.ndarray,
    indxq: np.ndarray,
    rho: float,
    cutpnt: int,
    secular: Secular,
) -> None:
    """Merge two solved halves (sizes cutpnt, n - cutpnt) and the rank-one tie ``rho``."""
    z = np.concatenate([q[cutpnt - 1, :cutpnt], q[cutpnt, cutpnt:]]).astype(np.float64)
    k, rho, dlambda, w, q2, indxc, ctot = dlaed2(n, cutpnt, d, q, indxq, rho, z)
    MERGES.append((n, k))
    if k != 0:
        dlaed3(k, n, cutpnt, d, q, rho, dlambda, q2, indxc, ctot, w, secular)
        indxq[:] = dlamrg(k, n - k, d, 1, -1)
    else:
        indxq[:] = np.arange(1, n + 1)


Leaves = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def port_steqr(d: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Our ONNX lowering's ``steqr`` (syevd.py), run in JAX float64, as a leaf solver."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from jax2onnx_nn.core.lowerings.lapack.syevd import steqr

    values, vectors = jax.jit(steqr)(np.asarray(d, np.float64), np.asarray(e, np.float64))
    return np.asarray(values), np.asarray(vectors)


def dlaed0(d: np.ndarray, e: np.ndarray, q: np.ndarray, secular: Secular, leaves: Leaves) -> None:
    """Divide and conquer on one unreduced block (COMPQ = 2): d, q in place, e destroyed."""
    n = d.shape[0]
    sizes = [n]
    while sizes[-1] > SMLSIZ:
        sizes = [h for s in sizes for h in (s // 2, (s + 1) // 2)]
    cum = list(np.cumsum(sizes))
    for b in cum[:-1]:  # the cuts: subtract |e| from both sides
        d[b - 1] = d[b - 1] - abs(e[b - 1])
        d[b] = d[b] - abs(e[b - 1])
    indxq = np.zeros(n, np.int64)
    q[:, :] = 0.0
    for i, size in enumerate(sizes):
        lo = 0 if i == 0 else cum[i - 1]
        hi = lo + size
        dv, zv = leaves(d[lo:hi], e[lo : hi - 1])
        d[lo:hi] = dv
        q[lo:hi, lo:hi] = zv
        indxq[lo:hi] = np.arange(1, size + 1)
    while len(cum) > 1:
        new_cum = []
        for i in range(0, len(cum), 2):
            lo = 0 if i == 0 else cum[i - 1]
            hi = cum[i + 1]
            msd2 = cum[i] - lo
            block = q[lo:hi, lo:hi]  # a view: dlaed1 writes through it
            dlaed1(hi - lo, d[lo:hi], block, indxq[lo:hi], float(e[lo + msd2 - 1]), msd2, secular)
            new_cum.append(hi)
        cum = new_cum
    order = indxq - 1
    d[:] = d[order].copy()
    q[:, :] = q[:, order].copy()


def dstedc(
    d: np.ndarray, e: np.ndarray, secular: str = "ours", leaves: str = "openblas"
) -> tuple[np.ndarray, np.ndarray]:
    """dstedc('I', ...) on the tridiagonal (d, e): (eigenvalues ascending, vectors as columns).

    ``secular``: "ours" (``dlaed4`` above) or "openblas" (OpenBLAS's dlaed4); ``leaves``:
    "openblas" (its dsteqr) or "port" (our lowering's ``steqr``, in JAX)."""
    solve: Secular = dlaed4 if secular == "ours" else openblas_dlaed4
    leaf: Leaves = openblas_dsteqr if leaves == "openblas" else port_steqr
    n = d.shape[0]
    d = np.array(d, np.float64)
    e = np.array(e, np.float64)
    if n <= SMLSIZ:
        return openblas_dsteqr(d, e)
    z = np.eye(n)
    if max(np.max(np.abs(d)), np.max(np.abs(e))) == 0.0:
        return d, z
    start = 0
    while start < n:
        finish = start
        while finish < n - 1:
            tiny = EPS * math.sqrt(abs(d[finish])) * math.sqrt(abs(d[finish + 1]))
            if abs(e[finish]) > tiny:
                finish += 1
            else:
                break
        m = finish - start + 1
        if m > 1:
            blk = slice(start, finish + 1)
            if m > SMLSIZ:
                orgnrm = max(np.max(np.abs(d[blk])), np.max(np.abs(e[start:finish])))
                d[blk] = d[blk] * (1.0 / orgnrm)
                e[start:finish] = e[start:finish] * (1.0 / orgnrm)
                dlaed0(d[blk], e[start:finish], z[blk, blk], solve, leaf)
                d[blk] = d[blk] * (orgnrm / 1.0)
            else:
                dv, zv = leaf(d[blk], e[start:finish])
                d[blk] = dv
                z[blk, blk] = zv
        start = finish + 1
    for ii in range(1, n):  # selection sort, as dstedc's loop 40
        i = ii - 1
        kk, p = i, d[i]
        for j in range(ii, n):
            if d[j] < p:
                kk, p = j, d[j]
        if kk != i:
            d[kk] = d[i]
            d[i] = p
            z[:, [i, kk]] = z[:, [kk, i]]
    return d, z


# ---------------------------------------------------------------------------------------------
# the comparison


def family(name: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A float64 tridiagonal (d, e) of one of the test families."""
    if name == "gaussian":
        return rng.normal(size=n), rng.normal(size=n - 1)
    if name == "sytrd":  # issue 34's matrices: distinct diagonal + a small perturbation
        from scipy.linalg import lapack

        x = rng.normal(size=n)
        a = np.outer(np.tanh(x), np.sin(x))
        a = (a + a.T) / 4 + np.diag(3.0 * np.arange(1, n + 1))
        _, d, e, _, info = lapack.dsytrd(a, lower=1)
        assert info == 0
        return d, e
    if name == "clustered":  # repeated diagonal values, weak coupling: heavy deflation
        return rng.integers(-3, 4, size=n).astype(np.float64), 1e-6 * rng.normal(size=n - 1)
    raise ValueError(name)


def compare(
    sizes: range, families: tuple[str, ...], count: int, secular: str, leaves: str, seed: int
) -> None:
    """Print per n: share of matrices with all vector signs equal to OpenBLAS dstedc's,
    share bitwise equal, max |vector difference|, max |value difference|, deflated share."""
    print(
        f"secular={secular} leaves={leaves} lapack_master={LAPACK_MASTER} "
        f"openblas_blas={OPENBLAS_BLAS} count={count}"
    )
    print("family     n  signs   bitwise  max|dZ|   max|dw|   deflated")
    for family_name in families:
        rng = np.random.default_rng(seed)
        for n in sizes:
            signs = bitwise = 0
            dz = dw = 0.0
            MERGES.clear()
            for _ in range(count):
                d, e = family(family_name, n, rng)
                w_ref, z_ref = openblas_dstedc(d, e)
                w, z = dstedc(d, e, secular=secular, leaves=leaves)
                signs += bool(np.all(np.sum(z * z_ref, axis=0) > 0))
                bitwise += bool(np.array_equal(z, z_ref) and np.array_equal(w, w_ref))
                dz = max(dz, float(np.max(np.abs(z - z_ref))))
                dw = max(dw, float(np.max(np.abs(w - w_ref))))
            size = sum(m for m, _ in MERGES)
            deflated = (size - sum(k for _, k in MERGES)) / max(size, 1)
            print(
                f"{family_name:9s} {n:3d}  {signs:2d}/{count}  {bitwise:2d}/{count}  "
                f"{dz:8.1e}  {dw:8.1e}  {deflated:5.1%}"
            )


def main(argv: list[str]) -> None:
    """Command line: ``[--sizes 26:65] [--count 10] [--secular ours|openblas]
    [--leaves openblas|port] [--master]``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="26:65", help="range lo:hi of n")
    parser.add_argument("--count", type=int, default=10, help="matrices per n and family")
    parser.add_argument("--families", default="gaussian,sytrd,clustered")
    parser.add_argument("--secular", default="ours", choices=["ours", "openblas"])
    parser.add_argument("--leaves", default="openblas", choices=["openblas", "port"])
    parser.add_argument("--master", action="store_true", help="LAPACK master's dlaed2/dlaed4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--openblas-blas", action="store_true", help="OpenBLAS dgemm/dnrm2/drot")
    args = parser.parse_args(argv)
    global LAPACK_MASTER, OPENBLAS_BLAS
    LAPACK_MASTER = args.master
    OPENBLAS_BLAS = args.openblas_blas
    lo, hi = (int(v) for v in args.sizes.split(":"))
    families = tuple(args.families.split(","))
    compare(range(lo, hi), families, args.count, args.secular, args.leaves, args.seed)


if __name__ == "__main__":
    main(sys.argv[1:])
