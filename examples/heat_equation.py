"""1-D heat equation with an explicit, CFL-limited time stepper (float64, while_loop).

The grid size N is symbolic in the exported graph: dx, the stable time step and the number
of steps are computed at run time from N and the inputs, so one ONNX file serves every grid.
The step count depends on the data, so the loop is an ONNX Loop; for tract, which has no Loop,
export with ``target="tract", loop_bound=N``: a Scan of N steps, the field NaN on a grid that
needs more. Run ``python -m examples.heat_equation [out.onnx]``.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import onnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core.jax_internals import x64


def heat_solve(u0: jax.Array, alpha: jax.Array, t_end: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Integrate u_t = alpha * u_xx on [0, 1] with u = 0 at both ends until t_end.

    Returns the final field and the number of steps taken.
    """
    n = u0.shape[0]
    dx = 1.0 / (n - 1)
    dt_stable = 0.4 * dx * dx / alpha  # CFL limit of the explicit scheme is 0.5

    def cond(state):
        t, _, _ = state
        return t < t_end

    def body(state):
        t, u, steps = state
        dt = jnp.minimum(dt_stable, t_end - t)
        lap = (u[:-2] - 2.0 * u[1:-1] + u[2:]) / (dx * dx)
        interior = u[1:-1] + dt * alpha * lap
        u = jnp.concatenate([jnp.zeros((1,), u.dtype), interior, jnp.zeros((1,), u.dtype)])
        return t + dt, u, steps + 1

    _, u, steps = jax.lax.while_loop(
        cond, body, (jnp.zeros((), u0.dtype), u0, jnp.zeros((), jnp.int32))
    )
    return u, steps


def initial_condition(n: int) -> jax.Array:
    x = jnp.linspace(0.0, 1.0, n, dtype=jnp.float64)
    return jnp.sin(jnp.pi * x) + 0.5 * jnp.sin(3 * jnp.pi * x)


def main(path: str = "heat_equation.onnx") -> onnx.ModelProto:
    """Export with a symbolic grid and check it against JAX on two grids: a valid problem
    (alpha > 0, as the CFL step needs; random inputs would give a negative step and a loop
    that never ends)."""
    specs = [(("N",), "float64"), ((), "float64"), ((), "float64")]
    to_onnx(heat_solve, specs, enable_double_precision=True, constraints=("N >= 3",), path=path)
    model = onnx.load(path)
    with x64(True):
        for n in (11, 41):
            values = [np.asarray(initial_condition(n)), np.float64(0.5), np.float64(0.02)]
            print(
                verify(heat_solve, model, specs, input_values=values, enable_double_precision=True)
            )
    return model


if __name__ == "__main__":
    main(*sys.argv[1:])
