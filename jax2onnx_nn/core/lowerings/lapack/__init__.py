"""lax.linalg as LAPACK in JAX: factorizations, solves and eigenproblems as exact ONNX arithmetic.

ONNX has no linear-algebra ops besides ``Det``, ``MatMul`` and ``Einsum``, so every rule here
is an algorithm written in JAX (slices, ``where``, products and sums on the operands' avals,
leading batch dims included) and lowered through the interpreter like any other jaxpr. Each
algorithm is a sequence of steps over the matrix size ``n`` (``steps.py``): for a static ``n`` up to
``UNROLL_LIMIT`` the steps are unrolled (static slices, masks folded into constants); for a
larger or symbolic ``n`` they become one ONNX ``Loop`` whose body is the same step on a traced
index (``dynamic_slice`` reads, ``where`` writes), so the graph size does not grow with ``n``.
``cholesky``, ``triangular_solve`` and a square ``lu`` or ``qr`` above ``UNROLL_LIMIT`` are
blocked instead: a Loop over blocks of columns (rows), each block unrolled on static slices
and the rest updated by one MatMul.

Steps write through ``where`` with masks, never by multiplying with 0/1 masks, so inf and NaN
stay where LAPACK puts them: a NaN in a row does not leak into the rows it is not added to.

What LAPACK (JAX's CPU path) does on degenerate inputs, and what these rules do the same way:

- ``cholesky`` reads the lower triangle and keeps the input's strict upper triangle (``potrf``
  works in place); a pivot ``<= 0`` (not PD) makes the whole matrix NaN, a NaN pivot only
  propagates.
- ``triangular_solve`` reads only the named triangle (and no diagonal with
  ``unit_diagonal``) and divides plainly: a zero pivot gives inf, or NaN for 0/0. With
  ``lu``'s unit L (lu_solve; solve and inv above ``UNROLL_LIMIT``) it multiplies by powers of
  L's strict triangle instead (``_unit_solve_by_powers``): the same numbers up to rounding, a
  NaN spread wider.
- ``solve`` and ``inv`` up to ``UNROLL_LIMIT`` (``solve_by_elimination``, through
  ``custom_linear_solve``) eliminate on [a | b] with ``lu``'s pivots and zero-pivot rule and
  substitute with U as trsm does: JAX's inf/NaN pattern on singular matrices; a NaN in a
  searched column makes the whole solution NaN (as in JAX), whichever row the search picks.
- ``lu`` pivots on the first entry of largest magnitude in the column (``idamax``; NaN entries
  are never chosen over numbers, where JAX's CPU idamax gives a column with a NaN other
  pivots that follow no documented rule) and skips the division by a zero pivot (``getf2``), so a
  singular matrix factors without NaN and ``det`` is 0.

The numbers agree with JAX's to rounding, not bitwise: JAX's CPU getrf/trsm (OpenBLAS) take
each entry as the input less one sum of products accumulated with fused multiply-adds (which
ONNX lacks) and scale by the pivot's reciprocal, where these steps subtract one product at a
time and divide (see docs/limitations.md). Multiplying by the reciprocal would need an
ONNX ``Reciprocal`` (onnxruntime's DivMulFusion turns ``x * (1 / p)`` back into ``x / p``):
measured, one node more a step for lu results bitwise JAX's in 6.7% of random float32 3x3 to
16x16 matrices instead of 2.5% (float64 5.2% instead of 2.0%, solve ~1% either way), so left out.

One module per routine: ``steps`` (the step machinery and the plain-ONNX step helpers every
routine uses), ``cholesky``, ``triangular`` (triangular_solve), ``lu``, ``householder`` (the
reflectors and the power-of-two scaling), ``qr``, ``hessenberg`` (and tridiagonal),
``complex_schur``, ``schur`` (real), ``balance``, ``eig``, ``svd`` (Jacobi svd and eigh),
``syevd`` (eigh up to 25x25 as LAPACK's own path, so its vectors carry JAX's signs),
``gesdd`` (svd with vectors, short side 2..128, as LAPACK's own path: JAX's signs),
``bdsdc`` (its divide and conquer above 25 rows),
``solves`` (tridiagonal_solve, custom_linear_solve, symmetric_product, cholesky_update).
Importing a module registers its rules; ``core/lowerings/__init__.py`` imports them all.
"""
