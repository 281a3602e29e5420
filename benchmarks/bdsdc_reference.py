"""A numpy transliteration of LAPACK's ``dbdsdc`` ('U', 'I'), checked against OpenBLAS's.

Groundwork for issue 34 (``svd`` vectors with JAX's signs above 25 rows). JAX's CPU ``svd`` is
``gesdd``, whose bidiagonal step is ``dbdsdc`` with COMPQ = 'I'; above SMLSIZ = 25 that is
divide and conquer, not ``dlasdq``'s QR sweeps (which our lowering in
``jax2onnx_nn/core/lowerings/lapack/gesdd.py`` reproduces). This module follows the reference
routines one by one, written from their semantics (0-based arrays, 1-based values where LAPACK
stores indices; dlasd2 keeps LAPACK's 1-based positions in padded work arrays):

- ``dbdsdc``: n <= 25: ``dlasdq`` and the sort. Otherwise scale d and e by their max-abs entry
  (``dlanst('M')``), set entries below 0.9 eps to +-0.9 eps, split at ``|e_i| < 0.9 eps``,
  ``dlasd0`` on each block, scale back; finally a selection sort into decreasing order that
  swaps U's columns and VT's rows.
- ``dlasdt``/``dlasd0``: the tree depends only on n (root centre row ``n // 2 + 1``, the halves
  halved again down to at most 25 rows: one merge for n = 26..51, three for 52..103). Every
  leaf but the last is n_l x (n_l + 1) (SQRE = 1: the column that couples it to the centre row
  above it); ``dlasdq`` solves the leaves (ascending order), ``dlasd1`` merges bottom up at each
  centre row ``ic`` with alpha = d_ic, beta = e_ic. No final permutation (dbdsdc sorts).
- ``dlasd1``: scale by max(|alpha|, |beta|, |d|) (d_ic = 0), ``dlasd2``, ``dlasd3``, scale
  back, ``dlamrg(k, n - k, d, 1, -1)`` (kept values ascending, deflated descending).
- ``dlasd2``: z = alpha times the left VT's last column, beta times the right VT's first
  (z_1 = alpha vt(nl+1, nl+1), and with SQRE = 1 the right block's null row adds z_m, rotated
  into z_1 by (c, s) = (z_1, z_m) / |(z_1, z_m)|, which also rotates VT's rows nl+1 and m);
  ``dlamrg`` sorts the two halves; tol = 8 eps max(|alpha|, |beta|, max d); entries with
  ``|z_j| <= tol`` deflate; a kept neighbour pair with ``|d_j - d_jprev| <= tol`` is rotated
  (U's two columns and VT's two rows) so that z_jprev = 0 (d itself is not changed, unlike
  ``dlaed2``); the vectors are grouped by column type (top only, bottom only, both, deflated);
  dsigma_1 = 0 (the centre row's pole, never deflated, z_1 floored at tol), dsigma_2 floored at
  tol / 2.
- ``dlasd3``: rho = |z|, z normalised; ``dlasd4`` for each root j gives sigma_j and both
  dsigma_i - sigma_j and dsigma_i + sigma_j; Gu-Eisenstat: |zhat_i|^2 = the product of
  (dsigma_i^2 - sigma_j^2) / (dsigma_i^2 - dsigma_j^2) terms, zhat_i with the sign of z_i; the
  right vectors zhat_i / (dsigma_i^2 - sigma_j^2), the left ones (-1, dsigma_i zhat_i /
  (dsigma_i^2 - sigma_j^2)), each normalised; the grouped GEMMs (U: rows 1..nl from types 1
  and 3, row nl+1 from the centre entry, the rest from types 2 and 3; VT: columns 1..nl+1 from
  row 1 and types 1 and 3, the rest from row 1 and types 2 and 3).
- ``dlasd4``/``dlasd5``: the secular equation in sigma^2, see the design note; ``dlaed6`` is
  ``dstedc_reference``'s (bitwise equal to OpenBLAS's through its ``dlaed4``).

The leaves use OpenBLAS's own ``dlasdq`` (``--leaves port``: our lowering's ``bdsqr`` behind
dlasdq's SQRE = 1 rotations, in JAX); ``dlasd4`` can be swapped for OpenBLAS's (``--secular
openblas``). OpenBLAS's routines are reached through ``scipy.linalg.cython_lapack``'s function
pointers (scipy's wheel bundles the same OpenBLAS build as jaxlib's LAPACK kernels); ``dgemm``,
``dnrm2`` and ``drot`` are numpy's unless ``--openblas-blas`` (``scipy.linalg.cython_blas``).

Run ``python3 -m benchmarks.bdsdc_reference`` for the per-n table (U column and VT row sign
agreement, bitwise share, max errors against OpenBLAS's ``dbdsdc``, deflated share),
``--dlasd4 N`` for dlasd4 alone, ``--flip-leaves`` for the sign-invariance test,
``--centre-rule`` for the sign shortcut of the design note.

Results (2026-12-06, OpenBLAS 0.3.30 from scipy 1.17.1, jax 0.10.2; ``jnp.linalg.svd`` equals
scipy's ``svd(lapack_driver="gesdd")`` bitwise (s, U, VT) on 16 of 16 float64 matrices:
shapes (26, 26), (26, 40), (40, 26), (32, 32), (48, 64), (64, 64), (64, 30), (100, 50),
gaussian and issue 34's kind)
-------------------------------------------------------------------------------------------

Families (20 upper bidiagonals each per n, n = 26..64, 780 per family): ``gaussian`` (d, e ~
N(0, 1)), ``gebrd`` (OpenBLAS's ``dgebrd`` of issue 34's tanh(x) / 5 + diag(3, 6, ..., 3n)),
``clustered`` (d in +-{1, 2, 3}, e ~ 1e-6 N(0, 1): 72-87% of the merge entries deflate, by
small z), ``repeated`` (the same with e ~ 1e-9: leaf values repeat to the bit, ~90% deflate,
close pairs by rotations).

- ``python3 -m benchmarks.bdsdc_reference --count 20 --openblas-blas --dlasd4 5000``
  (OpenBLAS's dgemm, dnrm2, drot): bitwise equal (values, U, VT) to OpenBLAS's ``dbdsdc`` in
  3120 / 3120 (every family, every n); ``dlasd4`` alone bitwise equal on 5001 / 5001 random
  calls (k = 1..40, all roots, half of them with dsigma_1 = 0): the merge is LAPACK's to the
  bit.
- ``... --count 20`` (numpy's GEMM and norms): U column signs and VT row signs equal in 3120 /
  3120; bitwise 398 / 3120 (gaussian 0, gebrd 0, clustered 41, repeated 357); max |dU|, |dVT|
  3.1e-14 (gaussian), 3.1e-15 (gebrd), 3.7e-3 (clustered: values ~1e-12 apart, vectors set by
  rounding inside a cluster, yet every sign agrees), 2.2e-16 (repeated); values within 4.0e-15
  (gaussian), 5.7e-14 (gebrd: 1 ulp of s ~ 190), 8.9e-16 (clustered), 0 (repeated).
- LAPACK master differs from OpenBLAS's bundled LAPACK (its lapack-netlib, compared as of
  2024-10) in ``dlasd2`` only (dbdsdc, dlasd0/1/3/4/5, dlasdt, dlasdq, dlamrg, dlaed6 differ
  in layout only): ``--master-order`` (7c8604c55, 2025-06: deflated indices
  stored in decreasing order where a close-pair rotation follows small-z deflations) changes
  ``repeated`` to 588 / 780 bitwise (U signs 623, VT signs 627) and leaves the other families
  bitwise: OpenBLAS 0.3.30 does not have it. ``--master-tolerance`` (0e0f23592, 2026-06: 64 eps)
  deflates more: U column signs then agree in only 493 / 780 gaussian, 480 / 780 clustered and
  762 / 780 repeated matrices. The graph must follow 0.3.30 (what jaxlib runs); a later
  OpenBLAS with these changes changes the signs (as for ``dlaed2``'s tolerance).
- ``... --leaves port --openblas-blas --count 4 --sizes 26,32,40,50,64`` (the leaves from our
  lowering's ``bdsqr``, JIT-compiled per leaf size, ~2-4 min each here): matrices with every
  sign right: gaussian 19 / 20 (one n = 50 miss, 16% deflation there, not investigated),
  gebrd 20 / 20 (no deflation; values within 2.6e-13, vectors 2.7e-14), clustered 14 / 20
  (7 / 8 at n = 26, 32 after undoing bdsdc's sort instead of reversing it, which orders ties
  as dlasdq does), repeated 0 / 20 (0 / 8 after that fix). The repeated family's leaves have
  singular values equal to the bit in OpenBLAS (1, 1, 1, 1, 1, 1, 2, ...) that the port gives
  up to 1 ulp apart (7.8e-16; the leaf vectors themselves agree, dot products 1): the ties'
  order in ``dlamrg`` and which pairs ``dlasd2`` rotates then differ, and the vectors of a
  repeated singular value are a basis that only the exact tie handling fixes: like
  ``dstedc_reference``'s clustered case, a graph reproduces them only with leaves equal to
  dlasdq's to the bit.

Design note: the merge as an ONNX graph for a static n
======================================================

The tree, leaf sizes, SQRE flags and merge order depend only on n (``dlasdt``), so the graph
unrolls them: n = 26..51 is two leaves and one merge, 52..64 four leaves and three merges (two
of them batched). Only dbdsdc's split at ``|e| < 0.9 eps`` (after scaling) is data-dependent;
as for ``dstedc`` it is rare and a first version documents it. Each merge then follows the
eigh design of ``dstedc_reference`` (rank computations for ``dlamrg``, a masked Loop over the
sorted entries for the close-pair deflation, vectorised secular iterations with a ``done``
mask, the Gu-Eisenstat products as a masked ReduceProd, one full GEMM per side with the
deflated/grouped columns as masks). What differs from the eigh merge:

1. Two vector sets. U is n x n and VT is m x m (m = n + SQRE); z comes from VT alone (alpha
   times the left VT's last column, beta times the right VT's first). Each deflation rotation
   acts on two U columns and two VT rows with the same (c, s); the final products are one
   GEMM for U (grouped U2 times the normalised left vectors) and one for VT (the normalised
   right vectors times grouped VT2), and two norms per root (``dnrm2`` of each side).
2. The extra row. The merged matrix is [B1 0; alpha e^T beta e^T; 0 B2] with n = nl + nr + 1:
   the centre row is a pole of its own (dsigma_1 = 0, always kept, z_1 floored at tol) whose U
   vector is e_{nl+1}, so the left vectors' centre entry is the constant -1 before
   normalisation, and dsigma_2 is floored at tol / 2. With SQRE = 1 (every merge but the last
   of a level) the right block's null vector (VT's row m) is rotated into z_1: one more Givens
   pair on VT's rows nl+1 and m, whose row m is kept for the next level. The leaves must be
   ``dlasdq`` with SQRE = 1: a sweep of right rotations (``dlartg``) that folds the extra
   column into a lower bidiagonal and VT's n_l + 1 rows, then the lower path that gesdd.py
   already has (rotate to upper, ``bdsqr``), then dlasdq's ascending order.
3. Deflation of a close pair does not touch d (the two values are taken as equal; ``dlaed2``
   rotates them), and OpenBLAS 0.3.30's deflated list is not sorted where a pair rotation
   follows small-z deflations: the graph's deflated-order permutation must be the discovery
   order (small-z entries in reverse sorted order, a rotated index stored after them), not a
   sort by value, or the next level's ``dlamrg`` gets a different order.
4. ``dlasd4`` solves for sigma^2 but keeps sigma: each root carries two [k] tensors, delta =
   dsigma - sigma and work = dsigma + sigma, whose product is every sum's denominator; each
   step's eta (in sigma^2 units) becomes a sigma increment eta / (sigma + sqrt(sigma^2 + eta))
   (one Sqrt per root per step), and tau (the offset from the origin pole d_i or d_i+1) is
   never formed as sigma - d. The initial guess solves the two-pole quadratic for tau^2 then
   tau = tau2 / (d + sqrt(d^2 + tau2)); the bounds sglb/sgub and the GEOMAVG branch (a tiny
   positive d_i: d_i <= sqrt(eps) d_i+1 and |z_i| <= sqrt(eps)) are per-root ``where``s;
   MAXIT is 400 (``dlaed4``'s 30). Measured steps per root (``--count 20 --openblas-blas``,
   k >= 3): mean 1.6 / 3.0 / 1.8 / 1.5, 99th percentile 5 / 4 / 19 / 7, max 8 / 6 / 32 / 13
   (gaussian / gebrd / clustered / repeated): a fixed unrolled count would have to be ~32 for
   the clustered case, so a ``Loop`` whose condition is "some root not done" (``done``
   freezing converged roots, as LAPACK stops each root) runs as long as the merge's slowest
   root, not a fixed worst case.
5. Gu-Eisenstat's products run over (delta work)_ij / ((dsigma_i - dsigma_j)(dsigma_i +
   dsigma_j)), with a sqrt(|.|) and z's sign; the left vector entries are dsigma_i times the
   right ones.

What decides the signs: a kept root's vectors are U_sub u and VT_sub^T v with u = (-1, dsigma_i
zhat_i / (dsigma_i^2 - sigma^2)), v_i = zhat_i / (dsigma_i^2 - sigma^2) and sign(zhat_i) =
sign(z_i), z taken from VT_sub's rows: negating a sub-block pair (its U column and VT row)
negates z_i too, so the product does not change, and the centre entry -1 fixes the sign. Hence
every kept left vector of a merge has a negative entry on that merge's centre row (checked on
OpenBLAS's U for gaussian n = 26..64, one matrix each: at the top merge's centre row ic exactly
the k kept columns are negative and the n - k deflated ones exactly 0). A deflated vector is a
sub-block vector, possibly rotated with a neighbour by dlasd2, so it carries the leaf's
``dlasdq`` sign (or a lower merge's). Checked with ``--flip-leaves`` (the leaves' pairs, null
rows included, negated at random, ``--flip-leaves --count 20``): gaussian: 0 of the 113 runs
without deflation change a final sign, 402 of the 667 with deflation do; gebrd (no deflation in
any of its 780 runs): 0 change; clustered and repeated (deflation in every run): 780 / 780
change each. So the signs follow (a) the centre-row rule for kept vectors, (b) the leaves'
dlasdq for deflated ones, and go wrong only where a deflation test (``|z_j| <= tol``, ``|d_j -
d_jprev| <= tol``) falls on the other side of its threshold. The centre-row rule also suggests a
cheaper route than porting the merge: take any accurate SVD of the bidiagonal and negate the
columns (with their VT rows) whose entry on the top merge's centre row is positive. Measured
with ``--centre-rule --count 20`` on scipy's ``gesvd`` (QR sweeps on the whole bidiagonal): the
columns LAPACK keeps at the top merge then have its sign in 30609 / 30627 gaussian (the 18
misses have centre entries of at most 7e-13: z_j just above tol), 35100 / 35100 gebrd (issue
34's kind: no deflation, all 780 matrices right), 5534 / 5705 clustered and 2544 / 2985 repeated
(inside a cluster the vectors are not unique and gesvd picks others). The deflated columns
(centre entry exactly 0 in LAPACK) still need the leaf rule (the sub-block's dlasdq, through the
lower merges for n >= 52) and the deflation decisions themselves, which only a faithful merge
makes.
"""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from benchmarks import dstedc_reference as _dc
from benchmarks.dstedc_reference import _int, _intp, _lapack_fn, _ptr, dlamrg, dlapy2, fsign

_f64p = ctypes.POINTER(ctypes.c_double)
SMLSIZ = 25  # ilaenv(9, 'DBDSDC', ...)
EPS = 2.0**-53  # dlamch('Epsilon')
MAXIT = 400  # dlasd4's iteration bound
DLASD4_STEPS: list[int] = []  # Newton-like steps of each dlasd4 root (k >= 3), for statistics
# OpenBLAS 0.3.30 (what jaxlib and scipy run) has dlasd2 as LAPACK 3.12: deflation tolerance
# 8 eps, and the index deflated by a close pair's rotation stored after the small-z indices
# found between the pair. LAPACK master changed both: 64 eps (0e0f23592, 2026-06) and the
# deflated indices kept in decreasing order (7c8604c55, 2025-06, after 0.3.30's release).
# False follows OpenBLAS 0.3.30, True LAPACK master (each change on its own flag).
MASTER_TOLERANCE = False
MASTER_ORDER = False

# ---------------------------------------------------------------------------------------------
# OpenBLAS's routines through scipy's function pointers (the references)

_DBDSDC = _lapack_fn(
    "dbdsdc", ctypes.c_char_p, ctypes.c_char_p, _intp, _f64p, _f64p, _f64p, _intp, _f64p, _intp,
    _f64p, _intp, _f64p, _intp, _intp, ctypes.c_size_t, ctypes.c_size_t,
)  # fmt: skip
_DLASDQ = _lapack_fn(
    "dlasdq", ctypes.c_char_p, _intp, _intp, _intp, _intp, _intp, _f64p, _f64p, _f64p, _intp,
    _f64p, _intp, _f64p, _intp, _f64p, _intp, ctypes.c_size_t,
)  # fmt: skip
_DLASD4 = _lapack_fn("dlasd4", _intp, _intp, _f64p, _f64p, _f64p, _f64p, _f64p, _f64p, _intp)
_DGEBRD = _lapack_fn(
    "dgebrd", _intp, _intp, _f64p, _intp, _f64p, _f64p, _f64p, _f64p, _f64p, _intp, _intp
)
_DGEMM = _dc._DGEMM


def openblas_dbdsdc(d: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenBLAS's dbdsdc('U', 'I', ...): (singular values descending, U, VT)."""
    n = d.shape[0]
    d = np.array(d, np.float64)
    e = np.array(np.append(e, 0.0), np.float64)
    u = np.zeros((n, n), np.float64, order="F")
    vt = np.zeros((n, n), np.float64, order="F")
    work = np.zeros(3 * n * n + 4 * n, np.float64)
    iwork = np.zeros(8 * n, np.int32)
    q, iq = np.zeros(1), np.zeros(1, np.int32)
    info = ctypes.c_int(0)
    _DBDSDC(
        b"U", b"I", _int(n), _ptr(d), _ptr(e), _ptr(u), _int(n), _ptr(vt), _int(n), _ptr(q),
        iq.ctypes.data_as(_intp), _ptr(work), iwork.ctypes.data_as(_intp), ctypes.byref(info),
        1, 1,
    )  # fmt: skip
    assert info.value == 0, info.value
    return d, np.array(u), np.array(vt)


def openblas_dlasdq(
    d: np.ndarray, e: np.ndarray, sqre: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenBLAS's dlasdq('U', sqre, ...) on the n x (n + sqre) upper bidiagonal with U, VT
    starting from the identity: (singular values ascending, U n x n, VT (n+sqre) square)."""
    n = d.shape[0]
    m = n + sqre
    d = np.array(d, np.float64)
    e = np.array(np.append(e, 0.0) if sqre == 0 else e, np.float64)
    assert e.size >= n
    u = np.asfortranarray(np.eye(n))
    vt = np.asfortranarray(np.eye(m))
    work = np.zeros(4 * m, np.float64)
    info = ctypes.c_int(0)
    _DLASDQ(
        b"U", _int(sqre), _int(n), _int(m), _int(n), _int(0), _ptr(d), _ptr(e), _ptr(vt),
        _int(m), _ptr(u), _int(n), _ptr(u), _int(n), _ptr(work), ctypes.byref(info), 1,
    )  # fmt: skip
    assert info.value == 0, info.value
    return d, np.array(u), np.array(vt)


def openblas_dlasd4(
    n: int, i: int, d: np.ndarray, z: np.ndarray, rho: float
) -> tuple[np.ndarray, float, np.ndarray]:
    """OpenBLAS's dlasd4 for root i (1-based): (delta = d - sigma, sigma, work = d + sigma)."""
    dd = np.ascontiguousarray(d[:n], np.float64)
    zz = np.ascontiguousarray(z[:n], np.float64)
    delta, work = np.zeros(n), np.zeros(n)
    sigma = ctypes.c_double(0.0)
    info = ctypes.c_int(0)
    r = ctypes.c_double(rho)
    _DLASD4(
        _int(n), _int(i), _ptr(dd), _ptr(zz), _ptr(delta), ctypes.byref(r), ctypes.byref(sigma),
        _ptr(work), ctypes.byref(info),
    )  # fmt: skip
    assert info.value == 0, info.value
    return delta, sigma.value, work


def openblas_dgebrd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bidiagonal (d, e) of OpenBLAS's dgebrd (upper for m >= n)."""
    m, n = a.shape
    af = np.asfortranarray(a, np.float64).copy(order="F")
    k = min(m, n)
    d, e = np.zeros(k), np.zeros(max(k - 1, 1))
    tauq, taup = np.zeros(k), np.zeros(k)
    lwork = 64 * (m + n)
    work = np.zeros(lwork)
    info = ctypes.c_int(0)
    _DGEBRD(
        _int(m), _int(n), _ptr(af), _int(m), _ptr(d), _ptr(e), _ptr(tauq), _ptr(taup),
        _ptr(work), _int(lwork), ctypes.byref(info),
    )  # fmt: skip
    assert info.value == 0, info.value
    return d, e[: k - 1]


# ---------------------------------------------------------------------------------------------
# BLAS-level helpers (OpenBLAS's kernels when dstedc_reference.OPENBLAS_BLAS is set)


def dgemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """a @ b (+ c, as DGEMM with beta = 1)."""
    if not _dc.OPENBLAS_BLAS:
        return a @ b if c is None else c + a @ b
    m, kk = a.shape
    nn = b.shape[1]
    af, bf = np.asfortranarray(a, np.float64), np.asfortranarray(b, np.float64)
    out = np.zeros((m, nn), order="F") if c is None else np.array(c, np.float64, order="F")
    one = ctypes.c_double(1.0)
    beta = ctypes.c_double(0.0 if c is None else 1.0)
    _DGEMM(
        b"N", b"N", _int(m), _int(nn), _int(kk), ctypes.byref(one), _ptr(af), _int(max(m, 1)),
        _ptr(bf), _int(max(kk, 1)), ctypes.byref(beta), _ptr(out), _int(max(m, 1)), 1, 1,
    )  # fmt: skip
    return np.array(out)


dnrm2 = _dc.dnrm2
drot = _dc.drot

# ---------------------------------------------------------------------------------------------
# the secular equation of the SVD: dlasd5, dlasd4 (1-based arrays: index 0 is padding)


def dlasd5(
    i: int, d: np.ndarray, z: np.ndarray, rho: float
) -> tuple[np.ndarray, float, np.ndarray]:
    """Root i of the 2 x 2 secular equation sigma^2 = d^2 + rho z z^T: (delta, sigma, work)."""
    d1, d2 = float(d[0]), float(d[1])
    z1, z2 = float(z[0]), float(z[1])
    dl = d2 - d1
    delsq = dl * (d2 + d1)
    if i == 1:
        w = 1.0 + 4.0 * rho * (z2 * z2 / (d1 + 3.0 * d2) - z1 * z1 / (3.0 * d1 + d2)) / dl
        if w > 0.0:
            b = delsq + rho * (z1 * z1 + z2 * z2)
            c = rho * z1 * z1 * delsq
            tau = 2.0 * c / (b + math.sqrt(abs(b * b - 4.0 * c)))
            tau = tau / (d1 + math.sqrt(d1 * d1 + tau))
            return np.array([-tau, dl - tau]), d1 + tau, np.array([2.0 * d1 + tau, (d1 + tau) + d2])
        b = -delsq + rho * (z1 * z1 + z2 * z2)
        c = rho * z2 * z2 * delsq
        if b > 0.0:
            tau = -2.0 * c / (b + math.sqrt(b * b + 4.0 * c))
        else:
            tau = (b - math.sqrt(b * b + 4.0 * c)) / 2.0
        tau = tau / (d2 + math.sqrt(abs(d2 * d2 + tau)))
    else:
        b = -delsq + rho * (z1 * z1 + z2 * z2)
        c = rho * z2 * z2 * delsq
        if b > 0.0:
            tau = (b + math.sqrt(b * b + 4.0 * c)) / 2.0
        else:
            tau = 2.0 * c / (-b + math.sqrt(b * b + 4.0 * c))
        tau = tau / (d2 + math.sqrt(d2 * d2 + tau))
    return np.array([-(dl + tau), -tau]), d2 + tau, np.array([d1 + tau + d2, 2.0 * d2 + tau])


def _quadratic_eta(a: float, b: float, c: float) -> float:
    """The root of c eta^2 - a eta + b = 0 that dlasd4 takes (a <= 0 and a > 0 forms)."""
    if a <= 0.0:
        return (a - math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
    return 2.0 * b / (a + math.sqrt(abs(a * a - 4.0 * b * c)))


def dlasd4(
    n: int, i: int, dd: np.ndarray, zz: np.ndarray, rho: float
) -> tuple[np.ndarray, float, np.ndarray]:
    """Root i (1-based) of 1 + rho sum z_j^2 / ((d_j - s)(d_j + s)) = 0, 0 <= d_1 < ... < d_n:
    (delta_j = d_j - sigma, sigma, work_j = d_j + sigma), each difference computed without
    cancellation from the origin pole (d_i or d_i+1)."""
    if n == 1:
        d0, z0 = float(dd[0]), float(zz[0])
        return np.array([1.0]), math.sqrt(d0 * d0 + rho * z0 * z0), np.array([1.0])
    if n == 2:
        return dlasd5(i, dd, zz, rho)
    d = [math.nan] + [float(v) for v in dd[:n]]
    z = [math.nan] + [float(v) for v in zz[:n]]
    eps = EPS
    rhoinv = 1.0 / rho
    rng_all = range(1, n + 1)
    if i == n:
        return _dlasd4_last(n, d, z, rho, rhoinv)
    ip1 = i + 1
    delsq = (d[ip1] - d[i]) * (d[ip1] + d[i])
    delsq2 = delsq / 2.0
    sq2 = math.sqrt((d[i] * d[i] + d[ip1] * d[ip1]) / 2.0)
    temp = delsq2 / (d[i] + sq2)
    work = [math.nan] + [d[j] + d[i] + temp for j in rng_all]
    delta = [math.nan] + [(d[j] - d[i]) - temp for j in rng_all]
    psi = 0.0
    for j in range(1, i):
        psi = psi + z[j] * z[j] / (work[j] * delta[j])
    phi = 0.0
    for j in range(n, i + 1, -1):
        phi = phi + z[j] * z[j] / (work[j] * delta[j])
    c = rhoinv + psi + phi
    w = c + z[i] * z[i] / (work[i] * delta[i]) + z[ip1] * z[ip1] / (work[ip1] * delta[ip1])
    geomavg = False
    if w > 0.0:  # the root is nearer d_i: origin d_i
        orgati = True
        ii = i
        sglb, sgub = 0.0, delsq2 / (d[i] + sq2)
        a = c * delsq + z[i] * z[i] + z[ip1] * z[ip1]
        b = z[i] * z[i] * delsq
        if a > 0.0:
            tau2 = 2.0 * b / (a + math.sqrt(abs(a * a - 4.0 * b * c)))
        else:
            tau2 = (a - math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
        tau = tau2 / (d[i] + math.sqrt(d[i] * d[i] + tau2))
        temp = math.sqrt(eps)
        if d[i] <= temp * d[ip1] and abs(z[i]) <= temp and d[i] > 0.0:
            tau = min(10.0 * d[i], sgub)
            geomavg = True
    else:  # nearer d_i+1: origin d_i+1
        orgati = False
        ii = ip1
        sglb, sgub = -delsq2 / (d[ii] + sq2), 0.0
        a = c * delsq - z[i] * z[i] - z[ip1] * z[ip1]
        b = z[ip1] * z[ip1] * delsq
        if a < 0.0:
            tau2 = 2.0 * b / (a - math.sqrt(abs(a * a + 4.0 * b * c)))
        else:
            tau2 = -(a + math.sqrt(abs(a * a + 4.0 * b * c))) / (2.0 * c)
        tau = tau2 / (d[ip1] + math.sqrt(abs(d[ip1] * d[ip1] + tau2)))
    sigma = d[ii] + tau
    work = [math.nan] + [d[j] + d[ii] + tau for j in rng_all]
    delta = [math.nan] + [(d[j] - d[ii]) - tau for j in rng_all]
    iim1, iip1 = ii - 1, ii + 1

    def sums() -> tuple[float, float, float, float, float]:
        """psi, dpsi (j < ii, ascending), phi, dphi (j > ii, descending), erretm."""
        psi = dpsi = erretm = 0.0
        for j in range(1, iim1 + 1):
            temp = z[j] / (work[j] * delta[j])
            psi = psi + z[j] * temp
            dpsi = dpsi + temp * temp
            erretm = erretm + psi
        erretm = abs(erretm)
        phi = dphi = 0.0
        for j in range(n, iip1 - 1, -1):
            temp = z[j] / (work[j] * delta[j])
            phi = phi + z[j] * temp
            dphi = dphi + temp * temp
            erretm = erretm + phi
        return psi, dpsi, phi, dphi, erretm

    psi, dpsi, phi, dphi, erretm = sums()
    w = rhoinv + phi + psi
    swtch3 = (w < 0.0) if orgati else (w > 0.0)
    if ii == 1 or ii == n:
        swtch3 = False
    temp = z[ii] / (work[ii] * delta[ii])
    dw = dpsi + dphi + temp * temp
    temp = z[ii] * temp
    w = w + temp
    erretm = 8.0 * (phi - psi) + erretm + 2.0 * rhoinv + 3.0 * abs(temp)

    def done() -> tuple[np.ndarray, float, np.ndarray]:
        DLASD4_STEPS.append(niter - 2)
        return np.array(delta[1:]), sigma, np.array(work[1:])

    niter = 2
    if abs(w) <= eps * erretm:
        return done()
    if w <= 0.0:
        sglb = max(sglb, tau)
    else:
        sgub = min(sgub, tau)
    swtch = False  # not used by the first step

    def two_pole_eta() -> float:
        """The step of the rational model through the two poles around the root."""
        nonlocal dpsi, dphi
        dtipsq = work[ip1] * delta[ip1]
        dtisq = work[i] * delta[i]
        if not swtch:
            if orgati:
                t = z[i] / dtisq
                c = w - dtipsq * dw + delsq * (t * t)
            else:
                t = z[ip1] / dtipsq
                c = w - dtisq * dw - delsq * (t * t)
        else:
            temp = z[ii] / (work[ii] * delta[ii])
            if orgati:
                dpsi = dpsi + temp * temp
            else:
                dphi = dphi + temp * temp
            c = w - dtisq * dpsi - dtipsq * dphi
        a = (dtipsq + dtisq) * w - dtipsq * dtisq * dw
        b = dtipsq * dtisq * w
        if c == 0.0:
            if a == 0.0:
                if not swtch:
                    if orgati:
                        a = z[i] * z[i] + dtipsq * dtipsq * (dpsi + dphi)
                    else:
                        a = z[ip1] * z[ip1] + dtisq * dtisq * (dpsi + dphi)
                else:
                    a = dtisq * dtisq * dpsi + dtipsq * dtipsq * dphi
            return b / a
        return _quadratic_eta(a, b, c)

    def three_pole_eta() -> float | None:
        """The step of dlaed6's model through three poles (None: dlaed6 failed)."""
        dtiim = work[iim1] * delta[iim1]
        dtiip = work[iip1] * delta[iip1]
        temp = rhoinv + psi + phi
        zz3 = [0.0, z[ii] * z[ii], 0.0]
        if swtch:
            c = temp - dtiim * dpsi - dtiip * dphi
            zz3[0] = dtiim * dtiim * dpsi
            zz3[2] = dtiip * dtiip * dphi
        elif orgati:
            temp1 = z[iim1] / dtiim
            temp1 = temp1 * temp1
            temp2 = (d[iim1] - d[iip1]) * (d[iim1] + d[iip1]) * temp1
            c = temp - dtiip * (dpsi + dphi) - temp2
            zz3[0] = z[iim1] * z[iim1]
            if dpsi < temp1:
                zz3[2] = dtiip * dtiip * dphi
            else:
                zz3[2] = dtiip * dtiip * ((dpsi - temp1) + dphi)
        else:
            temp1 = z[iip1] / dtiip
            temp1 = temp1 * temp1
            temp2 = (d[iip1] - d[iim1]) * (d[iim1] + d[iip1]) * temp1
            c = temp - dtiim * (dpsi + dphi) - temp2
            if dphi < temp1:
                zz3[0] = dtiim * dtiim * dpsi
            else:
                zz3[0] = dtiim * dtiim * (dpsi + (dphi - temp1))
            zz3[2] = z[iip1] * z[iip1]
        dd3 = np.array([dtiim, delta[ii] * work[ii], dtiip])
        try:
            return _dc.dlaed6(niter, orgati, c, dd3, np.array(zz3), w)
        except RuntimeError:
            return None

    while True:
        if swtch3:
            eta3 = three_pole_eta()
            if eta3 is None:
                swtch3 = False
                eta = two_pole_eta()
            else:
                eta = eta3
        else:
            eta = two_pole_eta()
        if w * eta >= 0.0:
            eta = -w / dw
        eta = eta / (sigma + math.sqrt(sigma * sigma + eta))
        temp = tau + eta
        if temp > sgub or temp < sglb:
            eta = (sgub - tau) / 2.0 if w < 0.0 else (sglb - tau) / 2.0
            if geomavg:
                if w < 0.0:
                    if tau > 0.0:
                        eta = math.sqrt(sgub * tau) - tau
                elif sglb > 0.0:
                    eta = math.sqrt(sglb * tau) - tau
        prew = w
        tau = tau + eta
        sigma = sigma + eta
        for j in rng_all:
            work[j] = work[j] + eta
            delta[j] = delta[j] - eta
        psi, dpsi, phi, dphi, erretm = sums()
        tau2 = work[ii] * delta[ii]
        temp = z[ii] / tau2
        dw = dpsi + dphi + temp * temp
        temp = z[ii] * temp
        w = rhoinv + phi + psi + temp
        erretm = 8.0 * (phi - psi) + erretm + 2.0 * rhoinv + 3.0 * abs(temp)
        if niter == 2:  # after the first step: choose the two-pole model's variant
            swtch = (-w > abs(prew) / 10.0) if orgati else (w > abs(prew) / 10.0)
        else:
            if w * prew > 0.0 and abs(w) > abs(prew) / 10.0:
                swtch = not swtch
        niter += 1
        if niter > MAXIT:
            raise RuntimeError("dlasd4 did not converge")
        if abs(w) <= eps * erretm:
            return done()
        if w <= 0.0:
            sglb = max(sglb, tau)
        else:
            sgub = min(sgub, tau)


def _dlasd4_last(
    n: int, d: list[float], z: list[float], rho: float, rhoinv: float
) -> tuple[np.ndarray, float, np.ndarray]:
    """dlasd4 for the largest root (i = n), beyond d_n (1-based padded lists)."""
    eps = EPS
    ii = n - 1
    rng_all = range(1, n + 1)
    temp = rho / 2.0
    temp1 = temp / (d[n] + math.sqrt(d[n] * d[n] + temp))
    work = [math.nan] + [d[j] + d[n] + temp1 for j in rng_all]
    delta = [math.nan] + [(d[j] - d[n]) - temp1 for j in rng_all]
    psi = 0.0
    for j in range(1, n - 1):
        psi = psi + z[j] * z[j] / (delta[j] * work[j])
    c = rhoinv + psi
    w = c + z[ii] * z[ii] / (delta[ii] * work[ii]) + z[n] * z[n] / (delta[n] * work[n])

    def initial_tau() -> float:
        delsq = (d[n] - d[n - 1]) * (d[n] + d[n - 1])
        a = -c * delsq + z[n - 1] * z[n - 1] + z[n] * z[n]
        b = z[n] * z[n] * delsq
        if a < 0.0:
            tau2 = 2.0 * b / (math.sqrt(a * a + 4.0 * b * c) - a)
        else:
            tau2 = (a + math.sqrt(a * a + 4.0 * b * c)) / (2.0 * c)
        return tau2 / (d[n] + math.sqrt(d[n] * d[n] + tau2))

    if w <= 0.0:
        temp1 = math.sqrt(d[n] * d[n] + rho)
        temp = (
            z[n - 1] * z[n - 1] / ((d[n - 1] + temp1) * (d[n] - d[n - 1] + rho / (d[n] + temp1)))
            + z[n] * z[n] / rho
        )
        tau = rho if c <= temp else initial_tau()
    else:
        tau = initial_tau()
    sigma = d[n] + tau
    delta = [math.nan] + [(d[j] - d[n]) - tau for j in rng_all]
    work = [math.nan] + [d[j] + d[n] + tau for j in rng_all]

    def sums() -> tuple[float, float, float, float, float, float]:
        psi = dpsi = erretm = 0.0
        for j in range(1, ii + 1):
            temp = z[j] / (delta[j] * work[j])
            psi = psi + z[j] * temp
            dpsi = dpsi + temp * temp
            erretm = erretm + psi
        erretm = abs(erretm)
        temp = z[n] / (delta[n] * work[n])
        phi = z[n] * temp
        dphi = temp * temp
        erretm = 8.0 * (-phi - psi) + erretm - phi + rhoinv
        w = rhoinv + phi + psi
        return psi, dpsi, phi, dphi, erretm, w

    psi, dpsi, phi, dphi, erretm, w = sums()
    first = True
    for steps in range(MAXIT):
        if abs(w) <= eps * erretm:
            DLASD4_STEPS.append(steps)
            return np.array(delta[1:]), sigma, np.array(work[1:])
        dtnsq1 = work[n - 1] * delta[n - 1]
        dtnsq = work[n] * delta[n]
        c = w - dtnsq1 * dpsi - dtnsq * dphi
        a = (dtnsq + dtnsq1) * w - dtnsq * dtnsq1 * (dpsi + dphi)
        b = dtnsq * dtnsq1 * w
        if first and c < 0.0:
            c = abs(c)
        if first and c == 0.0:
            eta = rho - sigma * sigma
        elif a >= 0.0:
            eta = (a + math.sqrt(abs(a * a - 4.0 * b * c))) / (2.0 * c)
        else:
            eta = 2.0 * b / (a - math.sqrt(abs(a * a - 4.0 * b * c)))
        if w * eta > 0.0:
            eta = -w / (dpsi + dphi)
        temp = eta - dtnsq
        if first:
            if temp > rho:
                eta = rho + dtnsq
        elif temp <= 0.0:
            eta = eta / 2.0
        eta = eta / (sigma + math.sqrt(eta + sigma * sigma))
        tau = tau + eta
        sigma = sigma + eta
        for j in rng_all:
            delta[j] = delta[j] - eta
            work[j] = work[j] + eta
        psi, dpsi, phi, dphi, erretm, w = sums()
        first = False
    raise RuntimeError("dlasd4 did not converge (last root)")


Secular = Callable[[int, int, np.ndarray, np.ndarray, float], tuple[np.ndarray, float, np.ndarray]]
MERGES: list[tuple[int, int]] = []  # (n, kept k) of each dlasd1 call, for the statistics

# ---------------------------------------------------------------------------------------------
# the merge: dlasd2 (deflation), dlasd3 (secular equation and vectors), dlasd1


def dlasd2(
    nl: int,
    nr: int,
    sqre: int,
    d: np.ndarray,
    alpha: float,
    beta: float,
    u: np.ndarray,
    vt: np.ndarray,
    idxq: np.ndarray,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """Deflate the merged problem [B1 0; alpha e_nl+1^T beta e_1^T; 0 B2] in place on d, u, vt.

    d holds the two halves' singular values at 0..nl-1 and nl+1..n-1 (d[nl] is the new row's
    slot), u is n x n, vt is m x m (m = n + sqre) with the right vectors as rows; idxq (1-based
    values at 0..nl-1 and nl+1..n-1) sorts each half ascending. Returns (k, z, dsigma, u2, vt2,
    idxc, ctot): the k secular entries z[:k], dsigma[:k] (dsigma[0] = 0 for the new row), the
    vectors grouped by column type (1: top only, 2: bottom only, 3: both, 4: deflated) and
    idxc mapping the grouped order to the dsigma order. 1-based indices as LAPACK's, shifted
    by one in the arrays."""
    n = nl + nr + 1
    m = n + sqre
    nlp1, nlp2 = nl + 1, nl + 2
    # 1-based padded work arrays
    Z = np.zeros(m + 1)
    D = np.concatenate([[math.nan], d])
    IDXQ = np.concatenate([[0], idxq]).astype(np.int64)
    COLTYP = np.zeros(n + 1, np.int64)
    DSIGMA = np.zeros(n + 1)
    U2c1 = np.zeros(n + 1)  # U2(:, 1) used as scratch for z
    IDXC = np.zeros(n + 1, np.int64)
    IDX = np.zeros(n + 1, np.int64)
    IDXP = np.zeros(n + 1, np.int64)
    z1 = alpha * vt[nlp1 - 1, nlp1 - 1]
    Z[1] = z1
    for i in range(nl, 0, -1):
        Z[i + 1] = alpha * vt[i - 1, nlp1 - 1]
        D[i + 1] = D[i]
        IDXQ[i + 1] = IDXQ[i] + 1
    for i in range(nlp2, m + 1):
        Z[i] = beta * vt[i - 1, nlp2 - 1]
    COLTYP[2 : nlp1 + 1] = 1
    COLTYP[nlp2 : n + 1] = 2
    IDXQ[nlp2 : n + 1] += nlp1
    for i in range(2, n + 1):
        DSIGMA[i] = D[IDXQ[i]]
        U2c1[i] = Z[IDXQ[i]]
        IDXC[i] = COLTYP[IDXQ[i]]
    IDX[2:] = dlamrg(nl, nr, DSIGMA[2:], 1, 1)
    for i in range(2, n + 1):
        idxi = 1 + IDX[i]
        D[i] = DSIGMA[idxi]
        Z[i] = U2c1[idxi]
        COLTYP[i] = IDXC[idxi]
    tol = max(abs(alpha), abs(beta))
    tol = (64.0 if MASTER_TOLERANCE else 8.0) * EPS * max(abs(D[n]), tol)

    def column(j: int) -> int:
        """The u column / vt row (1-based) of the entry at sorted position j."""
        idxj = int(IDXQ[IDX[j] + 1])
        return idxj - 1 if idxj <= nlp1 else idxj

    k = 1
    k2 = n + 1
    jprev = 0
    all_deflated = False
    for j in range(2, n + 1):
        if abs(Z[j]) <= tol:
            k2 -= 1
            IDXP[k2] = j
            COLTYP[j] = 4
            if j == n:
                all_deflated = True
        else:
            jprev = j
            break
    if not all_deflated:
        j = jprev
        while True:
            j += 1
            if j > n:
                break
            if abs(Z[j]) <= tol:
                k2 -= 1
                IDXP[k2] = j
                COLTYP[j] = 4
                continue
            close = (D[j] - D[jprev]) <= tol if MASTER_ORDER else abs(D[j] - D[jprev]) <= tol
            if close:  # rotate the pair so that z[jprev] = 0
                s = float(Z[jprev])
                c = float(Z[j])
                tau = dlapy2(c, s)
                c = c / tau
                s = -s / tau
                Z[j] = tau
                Z[jprev] = 0.0
                cp, cj = column(jprev) - 1, column(j) - 1
                u[:, cp], u[:, cj] = drot(u[:, cp].copy(), u[:, cj].copy(), c, s)
                vt[cp, :], vt[cj, :] = drot(vt[cp, :].copy(), vt[cj, :].copy(), c, s)
                if COLTYP[j] != COLTYP[jprev]:
                    COLTYP[j] = 3
                COLTYP[jprev] = 4
                k2 -= 1
                if MASTER_ORDER:
                    for jp in range(jprev, j):
                        IDXP[k2 + j - 1 - jp] = jp
                else:
                    IDXP[k2] = jprev
                jprev = j
            else:
                k += 1
                U2c1[k] = Z[jprev]
                DSIGMA[k] = D[jprev]
                IDXP[k] = jprev
                jprev = j
        k += 1
        U2c1[k] = Z[jprev]
        DSIGMA[k] = D[jprev]
        IDXP[k] = jprev
    ctot = [int(np.sum(COLTYP[2 : n + 1] == ct)) for ct in (1, 2, 3, 4)]
    psm = [2, 2 + ctot[0], 2 + ctot[0] + ctot[1], 2 + ctot[0] + ctot[1] + ctot[2]]
    for j in range(2, n + 1):
        ct = int(COLTYP[IDXP[j]])
        IDXC[psm[ct - 1]] = j
        psm[ct - 1] += 1
    u2 = np.zeros((n, n))
    vt2 = np.zeros((m, m))
    for j in range(2, n + 1):
        DSIGMA[j] = D[IDXP[j]]
        idxj = int(IDXQ[IDX[IDXP[IDXC[j]]] + 1])
        if idxj <= nlp1:
            idxj -= 1
        u2[:, j - 1] = u[:, idxj - 1]
        vt2[j - 1, :] = vt[idxj - 1, :]
    DSIGMA[1] = 0.0
    hlftol = tol / 2.0
    if abs(DSIGMA[2]) <= hlftol:
        DSIGMA[2] = hlftol
    if m > n:
        Z[1] = dlapy2(z1, Z[m])
        if Z[1] <= tol:
            c, s = 1.0, 0.0
            Z[1] = tol
        else:
            c = z1 / Z[1]
            s = Z[m] / Z[1]
    elif abs(z1) <= tol:
        Z[1] = tol
    else:
        Z[1] = z1
    Z[2 : k + 1] = U2c1[2 : k + 1]
    u2[:, 0] = 0.0
    u2[nlp1 - 1, 0] = 1.0
    if m > n:
        row_mid = vt[nlp1 - 1, :nlp1].copy()
        vt[m - 1, :nlp1] = -s * row_mid
        vt2[0, :nlp1] = c * row_mid
        vt2[0, nlp1:] = s * vt[m - 1, nlp1:]
        vt[m - 1, nlp1:] = c * vt[m - 1, nlp1:]
        vt2[m - 1, :] = vt[m - 1, :]
    else:
        vt2[0, :] = vt[nlp1 - 1, :]
    if n > k:
        d[k:n] = DSIGMA[k + 1 : n + 1]
        u[:, k:n] = u2[:, k:n]
        vt[k:n, :] = vt2[k:n, :]
    return k, Z[1 : k + 1].copy(), DSIGMA[1 : k + 1].copy(), u2, vt2, IDXC[1:].copy(), ctot


def dlasd3(
    nl: int,
    nr: int,
    sqre: int,
    k: int,
    d: np.ndarray,
    dsigma: np.ndarray,
    u: np.ndarray,
    u2: np.ndarray,
    vt: np.ndarray,
    vt2: np.ndarray,
    idxc: np.ndarray,
    ctot: list[int],
    z: np.ndarray,
    secular: Secular,
) -> None:
    """Roots of the secular equation, Gu-Eisenstat's z, the singular vectors of the deflated
    problem and their products with the grouped u2, vt2 (in place on d[:k], u[:, :k],
    vt[:k, :])."""
    n = nl + nr + 1
    m = n + sqre
    nlp1 = nl + 1
    if k == 1:
        d[0] = abs(z[0])
        vt[0, :] = vt2[0, :]
        u[:, 0] = u2[:, 0] if z[0] > 0.0 else -u2[:, 0]
        return
    zsign = z.copy()
    rho = dnrm2(z)
    z = z * (1.0 / rho)
    rho = rho * rho
    dif = np.zeros((k, k))  # U(i, j) = dsigma_i - sigma_j
    tot = np.zeros((k, k))  # VT(i, j) = dsigma_i + sigma_j
    for j in range(k):
        delta, sigma, work = secular(k, j + 1, dsigma, z, rho)
        dif[:, j] = delta
        tot[:, j] = work
        d[j] = sigma
    # Gu-Eisenstat: the z for which the computed sigma are exact
    zhat = np.zeros(k)
    for i in range(k):
        v = dif[i, k - 1] * tot[i, k - 1]
        for j in range(i):
            v = v * (dif[i, j] * tot[i, j] / (dsigma[i] - dsigma[j]) / (dsigma[i] + dsigma[j]))
        for j in range(i, k - 1):
            v = v * (
                dif[i, j] * tot[i, j] / (dsigma[i] - dsigma[j + 1]) / (dsigma[i] + dsigma[j + 1])
            )
        zhat[i] = fsign(math.sqrt(abs(v)), zsign[i])
    q = np.zeros((k, k))
    vq = np.zeros((k, k))  # VT(j, i) = zhat_j / (dsigma_j - sigma_i) / (dsigma_j + sigma_i)
    uq = np.zeros((k, k))  # U(j, i) = dsigma_j VT(j, i), U(1, i) = -1
    order = idxc[1:k] - 1
    for i in range(k):
        vq[:, i] = zhat / dif[:, i] / tot[:, i]
        uq[0, i] = -1.0
        uq[1:, i] = dsigma[1:] * vq[1:, i]
        temp = dnrm2(uq[:, i])
        q[0, i] = uq[0, i] / temp
        q[1:, i] = uq[order, i] / temp
    if k == 2:
        u[:, :k] = dgemm(u2[:, :k], q)
    else:
        c1, c2, c3 = ctot[0], ctot[1], ctot[2]
        kt = 1 + c1 + c2  # 0-based start of the type-3 group
        if c1 > 0:
            top = dgemm(u2[:nl, 1 : 1 + c1], q[1 : 1 + c1, :])
            if c3 > 0:
                top = dgemm(u2[:nl, kt : kt + c3], q[kt : kt + c3, :], top)
        elif c3 > 0:
            top = dgemm(u2[:nl, kt : kt + c3], q[kt : kt + c3, :])
        else:
            top = u2[:nl, :k].copy()
        u[:nl, :k] = top
        u[nlp1 - 1, :k] = q[0, :]
        kt = 1 + c1
        u[nlp1:n, :k] = dgemm(u2[nlp1:n, kt : kt + c2 + c3], q[kt : kt + c2 + c3, :])
    for i in range(k):
        temp = dnrm2(vq[:, i])
        q[i, 0] = vq[0, i] / temp
        q[i, 1:] = vq[order, i] / temp
    if k == 2:
        vt[:k, :m] = dgemm(q, vt2[:k, :m])
        return
    c1, c2, c3 = ctot[0], ctot[1], ctot[2]
    left = dgemm(q[:, : 1 + c1], vt2[: 1 + c1, :nlp1])
    kt = 1 + c1 + c2
    if kt < m:  # KTEMP <= LDVT2 (1-based)
        left = dgemm(q[:, kt : kt + c3], vt2[kt : kt + c3, :nlp1], left)
    vt[:k, :nlp1] = left
    kt = c1  # 0-based column ctot(1) + 1
    if kt > 0:
        q[:, kt] = q[:, 0]
        vt2[kt, nlp1:m] = vt2[0, nlp1:m]
    ct = 1 + c2 + c3
    vt[:k, nlp1:m] = dgemm(q[:, kt : kt + ct], vt2[kt : kt + ct, nlp1:m])


def dlasd1(
    nl: int,
    nr: int,
    sqre: int,
    d: np.ndarray,
    alpha: float,
    beta: float,
    u: np.ndarray,
    vt: np.ndarray,
    idxq: np.ndarray,
    secular: Secular,
) -> None:
    """Merge two solved halves and the row (alpha, beta) between them, in place on the views
    d (n), u (n x n), vt (m x m) and idxq (the new sorting index, 1-based values)."""
    n = nl + nr + 1
    d[nl] = 0.0
    orgnrm = max(abs(alpha), abs(beta), float(np.max(np.abs(d[:n]))))
    d[:n] = d[:n] * (1.0 / orgnrm)
    alpha = alpha / orgnrm
    beta = beta / orgnrm
    k, z, dsigma, u2, vt2, idxc, ctot = dlasd2(nl, nr, sqre, d, alpha, beta, u, vt, idxq)
    MERGES.append((n, k))
    dlasd3(nl, nr, sqre, k, d, dsigma, u, u2, vt, vt2, idxc, ctot, z, secular)
    d[:n] = d[:n] * orgnrm
    idxq[:] = dlamrg(k, n - k, d, 1, -1)


def dlasdt(n: int, msub: int) -> tuple[int, list[int], list[int], list[int]]:
    """The tree of dlasd0: (levels, centres inode, left sizes ndiml, right sizes ndimr), node
    1 the root, nodes 2l, 2l + 1 the children of node l (1-based centres)."""
    lvl = int(math.log(max(1, n) / (msub + 1)) / math.log(2.0)) + 1
    half = n // 2
    inode, ndiml, ndimr = [half + 1], [half], [n - half - 1]
    llst = 1
    for _ in range(1, lvl):
        for i in range(llst):
            cur = llst + i - 1
            left_l = ndiml[cur] // 2
            left_r = ndiml[cur] - left_l - 1
            right_l = ndimr[cur] // 2
            right_r = ndimr[cur] - right_l - 1
            inode += [inode[cur] - left_r - 1, inode[cur] + right_l + 1]
            ndiml += [left_l, right_l]
            ndimr += [left_r, right_r]
        llst *= 2
    return lvl, inode, ndiml, ndimr


Leaves = Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def dlasd0(
    d: np.ndarray,
    e: np.ndarray,
    u: np.ndarray,
    vt: np.ndarray,
    secular: Secular,
    leaves: Leaves,
) -> None:
    """Divide and conquer on one n x n upper bidiagonal (SQRE = 0): d, u, vt in place (u, vt
    start as the identity); e destroyed. The result is not sorted (dbdsdc sorts)."""
    n = d.shape[0]
    if n <= SMLSIZ:
        d[:], u[:, :], vt[:, :] = leaves(d, e, 0)
        return
    nlvl, inode, ndiml, ndimr = dlasdt(n, SMLSIZ)
    nd = len(inode)
    idxq = np.zeros(n, np.int64)
    for i in range((nd + 1) // 2, nd + 1):  # the leaves: children of the last level's nodes
        ic, nl, nr = inode[i - 1], ndiml[i - 1], ndimr[i - 1]
        nlf, nrf = ic - nl, ic + 1  # 1-based
        lo = nlf - 1
        dv, uv, vv = leaves(d[lo : lo + nl], e[lo : lo + nl], 1)
        d[lo : lo + nl] = dv
        u[lo : lo + nl, lo : lo + nl] = uv
        vt[lo : lo + nl + 1, lo : lo + nl + 1] = vv
        idxq[lo : lo + nl] = np.arange(1, nl + 1)
        sqrei = 0 if i == nd else 1
        lo = nrf - 1
        dv, uv, vv = leaves(d[lo : lo + nr], e[lo : lo + nr - 1 + sqrei], sqrei)
        d[lo : lo + nr] = dv
        u[lo : lo + nr, lo : lo + nr] = uv
        vt[lo : lo + nr + sqrei, lo : lo + nr + sqrei] = vv
        idxq[lo : lo + nr] = np.arange(1, nr + 1)
    for lvl in range(nlvl, 0, -1):
        lf = 1 if lvl == 1 else 2 ** (lvl - 1)
        ll = 1 if lvl == 1 else 2 * lf - 1
        for i in range(lf, ll + 1):
            ic, nl, nr = inode[i - 1], ndiml[i - 1], ndimr[i - 1]
            lo = ic - nl - 1
            sqrei = 0 if i == ll else 1
            size = nl + nr + 1
            msize = size + sqrei
            dlasd1(
                nl, nr, sqrei, d[lo : lo + size], float(d[ic - 1]), float(e[ic - 1]),
                u[lo : lo + size, lo : lo + size], vt[lo : lo + msize, lo : lo + msize],
                idxq[lo : lo + size], secular,
            )  # fmt: skip


_PORT_BDSQR: dict[int, Callable[..., Any]] = {}


def port_dlasdq(
    d: np.ndarray, e: np.ndarray, sqre: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dlasdq('U', sqre, ...) built on our lowering's ``bdsqr`` (gesdd.py, run in JAX float64):
    for sqre = 1 dlasdq's sweep of right rotations (its ``dlartg``, as the port's ``_lartg``)
    folds the extra column in, leaving a lower bidiagonal and VT's rows rotated, the rest is
    the port's lower path; bdsdc's descending sort is undone into dlasdq's ascending order."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from jax2onnx_nn.core.lowerings.lapack.gesdd import _lartg, bdsqr

    n = d.shape[0]
    dd = [float(v) for v in d]
    ee = [float(v) for v in e]
    vt = np.eye(n + sqre)
    if sqre:

        def lartg(f: float, g: float) -> tuple[float, float, float]:
            c, s, r = _lartg(jnp.float64(f), jnp.float64(g))
            return float(c), float(s), float(r)

        for i in range(n):
            cs, sn, r = lartg(dd[i], ee[i])
            dd[i] = r
            if i < n - 1:
                ee[i] = sn * dd[i + 1]
                dd[i + 1] = cs * dd[i + 1]
            # dlasr('L', 'V', 'F'): rows i, i + 1 of VT
            top, bottom = vt[i].copy(), vt[i + 1].copy()
            vt[i + 1] = cs * bottom - sn * top
            vt[i] = sn * bottom + cs * top
    if sqre not in _PORT_BDSQR:  # one jit per SQRE: retraced (and compiled) per leaf size only
        _PORT_BDSQR[sqre] = jax.jit(partial(bdsqr, lower=bool(sqre)))
    run = _PORT_BDSQR[sqre]
    values, u, vtb = (np.asarray(x) for x in run(np.array(dd), np.array(ee[: n - 1])))
    # the port ends in bdsdc's descending order; undo that selection sort (it depends only on
    # the ascending values, ties included) to get dlasdq's ascending order
    ascending = np.sort(values)
    moved, at = list(ascending), list(range(n))
    for i in range(n - 1):
        kk = i
        for j in range(i + 1, n):
            if moved[j] > moved[kk]:
                kk = j
        if kk != i:
            moved[i], moved[kk] = moved[kk], moved[i]
            at[i], at[kk] = at[kk], at[i]
    u_asc, vt_asc = np.empty_like(u), np.empty_like(vtb)
    u_asc[:, at], vt_asc[at] = u, vtb
    vt[:n] = vt_asc @ vt[:n]
    return ascending, u_asc, vt


def flip_leaf_signs(rng: np.random.Generator) -> Leaves:
    """OpenBLAS's dlasdq leaves with each singular pair (u column, vt row) and the null row
    of an n x (n + 1) leaf negated at random: a valid SVD of the leaf with other signs."""

    def leaf(d: np.ndarray, e: np.ndarray, sqre: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        dv, uv, vv = openblas_dlasdq(d, e, sqre)
        flips = rng.choice([-1.0, 1.0], size=vv.shape[0])
        return dv, uv * flips[: uv.shape[0]], vv * flips[:, None]

    return leaf


def dbdsdc(
    d: np.ndarray,
    e: np.ndarray,
    secular: str = "ours",
    leaves: Leaves | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dbdsdc('U', 'I', ...) on the upper bidiagonal (d, e): (singular values descending, U,
    VT). ``secular``: "ours" (dlasd4 above) or "openblas"; ``leaves``: the dlasdq used on the
    leaves (default OpenBLAS's)."""
    solve: Secular = dlasd4 if secular == "ours" else openblas_dlasd4
    leaf: Leaves = openblas_dlasdq if leaves is None else leaves
    n = d.shape[0]
    d = np.array(d, np.float64)
    e = np.array(e, np.float64)
    u = np.eye(n)
    vt = np.eye(n)
    if n == 1:
        u[0, 0] = fsign(1.0, d[0])
        d[0] = abs(d[0])
        return d, u, vt
    if n <= SMLSIZ:
        d, u, vt = leaf(d, e, 0)
    else:
        orgnrm = max(float(np.max(np.abs(d))), float(np.max(np.abs(e))))
        if orgnrm == 0.0:
            return d, u, vt
        d = d * (1.0 / orgnrm)
        e = e * (1.0 / orgnrm)
        eps = 0.9 * EPS
        for i in range(n):
            if abs(d[i]) < eps:
                d[i] = fsign(eps, d[i])
        start = 0
        for i in range(n - 1):  # 0-based i: the split after row i at a negligible e_i
            if abs(e[i]) < eps or i == n - 2:
                if i < n - 2:
                    nsize = i - start + 1
                elif abs(e[i]) >= eps:
                    nsize = n - start
                else:
                    nsize = i - start + 1
                    u[n - 1, n - 1] = fsign(1.0, d[n - 1])
                    vt[n - 1, n - 1] = 1.0
                    d[n - 1] = abs(d[n - 1])
                blk = slice(start, start + nsize)
                dv = d[blk].copy()
                ub, vb = u[blk, blk].copy(), vt[blk, blk].copy()
                dlasd0(dv, e[start : start + nsize].copy(), ub, vb, solve, leaf)
                d[blk], u[blk, blk], vt[blk, blk] = dv, ub, vb
                start = i + 1
        d = d * orgnrm
    for ii in range(1, n):  # selection sort into decreasing order, as dbdsdc's loop 60
        i = ii - 1
        kk, p = i, d[i]
        for j in range(ii, n):
            if d[j] > p:
                kk, p = j, d[j]
        if kk != i:
            d[kk] = d[i]
            d[i] = p
            u[:, [i, kk]] = u[:, [kk, i]]
            vt[[i, kk], :] = vt[[kk, i], :]
    return d, u, vt


# ---------------------------------------------------------------------------------------------
# the comparison


def family(name: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A float64 upper bidiagonal (d, e) of one of the test families."""
    if name == "gaussian":
        return rng.normal(size=n), rng.normal(size=n - 1)
    if name == "gebrd":  # issue 34's matrices: tanh(x) / 5 + diag(3, 6, 9, ...)
        x = rng.normal(size=(n, n))
        return openblas_dgebrd(np.tanh(x) / 5 + np.diag(3.0 * np.arange(1, n + 1)))
    if name == "clustered":  # repeated |d|, weak coupling: heavy deflation
        d = rng.integers(1, 4, size=n) * rng.choice([-1.0, 1.0], size=n)
        return d.astype(np.float64), 1e-6 * rng.normal(size=n - 1)
    if name == "repeated":  # equal leaf singular values: close pairs deflate by rotations
        d = rng.integers(1, 4, size=n) * rng.choice([-1.0, 1.0], size=n)
        return d.astype(np.float64), 1e-9 * rng.normal(size=n - 1)
    raise ValueError(name)


def compare(
    sizes: Sequence[int],
    families: tuple[str, ...],
    count: int,
    secular: str,
    seed: int,
    leaves: str,
) -> None:
    """Print per n: matrices whose U columns / VT rows all have OpenBLAS dbdsdc's signs,
    matrices bitwise equal (values, U, VT), max |dU|, |dVT|, |ds|, share of deflated entries."""
    print(
        f"secular={secular} master_tolerance={MASTER_TOLERANCE} master_order={MASTER_ORDER} "
        f"openblas_blas={_dc.OPENBLAS_BLAS} leaves={leaves} count={count}"
    )
    print("family      n  U signs VT signs bitwise  max|dU|   max|dVT|  max|ds|   deflated")
    for family_name in families:
        rng = np.random.default_rng(seed)
        DLASD4_STEPS.clear()
        for n in sizes:
            usigns = vsigns = bitwise = 0
            du = dv = ds = 0.0
            MERGES.clear()
            for _ in range(count):
                d, e = family(family_name, n, rng)
                s_ref, u_ref, vt_ref = openblas_dbdsdc(d, e)
                leaf = port_dlasdq if leaves == "port" else None
                s, u, vt = dbdsdc(d, e, secular=secular, leaves=leaf)
                usigns += bool(np.all(np.sum(u * u_ref, axis=0) > 0))
                vsigns += bool(np.all(np.sum(vt * vt_ref, axis=1) > 0))
                bitwise += bool(
                    np.array_equal(s, s_ref)
                    and np.array_equal(u, u_ref)
                    and np.array_equal(vt, vt_ref)
                )
                du = max(du, float(np.max(np.abs(u - u_ref))))
                dv = max(dv, float(np.max(np.abs(vt - vt_ref))))
                ds = max(ds, float(np.max(np.abs(s - s_ref))))
            size = sum(m for m, _ in MERGES)
            deflated = (size - sum(k for _, k in MERGES)) / max(size, 1)
            print(
                f"{family_name:10s} {n:3d}  {usigns:3d}/{count} {vsigns:3d}/{count} "
                f"{bitwise:3d}/{count}  {du:8.1e}  {dv:8.1e}  {ds:8.1e}  {deflated:5.1%}"
            )
        if DLASD4_STEPS:
            steps = np.array(DLASD4_STEPS)
            print(
                f"{family_name:10s} dlasd4 steps per root (ours): mean {steps.mean():.2f}, "
                f"99th percentile {np.percentile(steps, 99):.0f}, max {steps.max()}"
            )


def compare_dlasd4(calls: int, seed: int) -> None:
    """dlasd4 against OpenBLAS's on random secular equations (k = 3..40, all roots)."""
    rng = np.random.default_rng(seed)
    equal = total = 0
    while total < calls:
        k = int(rng.integers(1, 41))
        d = np.sort(np.abs(rng.normal(size=k)))
        d[0] = 0.0 if rng.random() < 0.5 else d[0]  # dlasd3's dsigma_1 = 0 (the new row)
        z = rng.normal(size=k)
        z /= np.linalg.norm(z)
        rho = float(abs(rng.normal()) + 0.1)
        for i in range(1, k + 1):
            ref = openblas_dlasd4(k, i, d, z, rho)
            ours = dlasd4(k, i, d, z, rho)
            total += 1
            equal += bool(
                ours[1] == ref[1]
                and np.array_equal(ours[0], ref[0])
                and np.array_equal(ours[2], ref[2])
            )
    print(f"dlasd4: bitwise equal to OpenBLAS's on {equal} / {total} random calls")


def sign_invariance(sizes: Sequence[int], families: tuple[str, ...], count: int, seed: int) -> None:
    """Flip the leaves' singular-vector signs at random and count the runs whose final U
    column or VT row signs change, apart for runs with and without deflation."""
    print("family      runs without deflation: changed | with deflation: changed")
    for family_name in families:
        rng = np.random.default_rng(seed)
        flips = np.random.default_rng(seed + 1)
        plain = [0, 0]
        deflating = [0, 0]
        for n in sizes:
            for _ in range(count):
                d, e = family(family_name, n, rng)
                MERGES.clear()
                _, u0, vt0 = dbdsdc(d, e)
                deflated = any(k < m for m, k in MERGES)
                _, u1, vt1 = dbdsdc(d, e, leaves=flip_leaf_signs(flips))
                changed = bool(
                    np.any(np.sum(u0 * u1, axis=0) < 0) or np.any(np.sum(vt0 * vt1, axis=1) < 0)
                )
                tally = deflating if deflated else plain
                tally[0] += 1
                tally[1] += changed
        print(
            f"{family_name:10s}  {plain[0]:4d} runs: {plain[1]:4d} changed | "
            f"{deflating[0]:4d} runs: {deflating[1]:4d} changed"
        )


def centre_row_rule(sizes: Sequence[int], families: tuple[str, ...], count: int, seed: int) -> None:
    """The design note's shortcut on another algorithm: scipy's ``gesvd`` (QR sweeps on the whole
    bidiagonal) with each U column (and its VT row) negated where its entry on the top merge's
    centre row is positive; count the columns LAPACK kept at that merge (centre entry nonzero
    in OpenBLAS's U) whose sign then equals OpenBLAS dbdsdc's."""
    import scipy.linalg

    print("family      kept columns right | matrices with every kept column right | deflated")
    for family_name in families:
        rng = np.random.default_rng(seed)
        right = kept_total = deflated = matrices = all_right = 0
        for n in sizes:
            for _ in range(count):
                d, e = family(family_name, n, rng)
                _, u_ref, _ = openblas_dbdsdc(d, e)
                u, _, _ = scipy.linalg.svd(np.diag(d) + np.diag(e, 1), lapack_driver="gesvd")
                centre = dlasdt(n, SMLSIZ)[1][0] - 1
                kept = u_ref[centre] != 0.0
                u = np.where(u[centre] > 0, -u, u)
                agree = np.sum(u * u_ref, axis=0) > 0
                right += int(np.sum(agree & kept))
                kept_total += int(np.sum(kept))
                deflated += int(np.sum(~kept))
                matrices += 1
                all_right += bool(np.all(agree[kept]))
        print(
            f"{family_name:10s}  {right:5d} / {kept_total:5d}  |  {all_right:4d} / {matrices:4d}  "
            f"|  {deflated:5d}"
        )


def main(argv: list[str]) -> None:
    """Command line: ``[--sizes 26:65] [--count 10] [--families ...] [--secular ours|openblas]
    [--master] [--openblas-blas] [--dlasd4 N]``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="26:65", help="n: range lo:hi or a list n1,n2")
    parser.add_argument("--count", type=int, default=10, help="matrices per n and family")
    parser.add_argument("--families", default="gaussian,gebrd,clustered,repeated")
    parser.add_argument("--secular", default="ours", choices=["ours", "openblas"])
    parser.add_argument("--leaves", default="openblas", choices=["openblas", "port"])
    parser.add_argument("--master", action="store_true", help="LAPACK master's dlasd2")
    parser.add_argument("--master-tolerance", action="store_true", help="only its 64 eps")
    parser.add_argument("--master-order", action="store_true", help="only its ordering fix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--openblas-blas", action="store_true", help="OpenBLAS dgemm/dnrm2/drot")
    parser.add_argument("--dlasd4", type=int, default=0, help="also compare N dlasd4 calls")
    parser.add_argument("--flip-leaves", action="store_true", help="the sign invariance test")
    parser.add_argument("--centre-rule", action="store_true", help="the centre-row shortcut")
    args = parser.parse_args(argv)
    global MASTER_TOLERANCE, MASTER_ORDER
    MASTER_TOLERANCE = args.master or args.master_tolerance
    MASTER_ORDER = args.master or args.master_order
    _dc.OPENBLAS_BLAS = args.openblas_blas
    if args.dlasd4:
        compare_dlasd4(args.dlasd4, args.seed)
    if ":" in args.sizes:
        lo, hi = (int(v) for v in args.sizes.split(":"))
        sizes: Sequence[int] = range(lo, hi)
    else:
        sizes = [int(v) for v in args.sizes.split(",")]
    families = tuple(args.families.split(","))
    if args.flip_leaves:
        sign_invariance(sizes, families, args.count, args.seed)
        return
    if args.centre_rule:
        centre_row_rule(sizes, families, args.count, args.seed)
        return
    compare(sizes, families, args.count, args.secular, args.seed, args.leaves)


if __name__ == "__main__":
    main(sys.argv[1:])
