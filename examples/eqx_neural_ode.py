"""A neural ODE in float64: an Equinox MLP vector field integrated by a fixed-step RK4 loop.

``dy/dt = f(t, y)`` with ``f`` an ``eqx.nn.MLP`` taking ``(t, y)``; ``lax.fori_loop`` runs the
classic fourth-order Runge-Kutta step ``STEPS`` times. Exported with
``enable_double_precision=True`` (everything stays float64), batched over initial states, and
checked against JAX to 1e-12. Run ``python -m examples.eqx_neural_ode [out.onnx]``.
"""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.equinox import export_onnx

STATE, STEPS, T1 = 3, 20, 1.0


class VectorField(eqx.Module):
    mlp: eqx.nn.MLP

    def __call__(self, t: jax.Array, y: jax.Array) -> jax.Array:
        return self.mlp(jnp.concatenate([t[None], y]))


class NeuralODE(eqx.Module):
    field: VectorField
    t1: float = eqx.field(static=True)
    steps: int = eqx.field(static=True)

    def __call__(self, y0: jax.Array) -> jax.Array:
        dt = self.t1 / self.steps

        def rk4(i: jax.Array, y: jax.Array) -> jax.Array:
            t = i * dt
            k1 = self.field(t, y)
            k2 = self.field(t + dt / 2, y + dt / 2 * k1)
            k3 = self.field(t + dt / 2, y + dt / 2 * k2)
            k4 = self.field(t + dt, y + dt * k3)
            return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

        return jax.lax.fori_loop(0, self.steps, rk4, y0)


def build() -> NeuralODE:
    """The model in float64 (make it with x64 on: its weights are float64 arrays)."""
    mlp = eqx.nn.MLP(
        STATE + 1, STATE, 32, 2, activation=jnp.tanh, dtype=jnp.float64, key=jax.random.key(0)
    )
    return NeuralODE(VectorField(mlp), T1, STEPS)


def main(path: str = "eqx_neural_ode.onnx") -> onnx.ModelProto:
    with x64(True):
        model = build()
        export_onnx(model, [(STATE,)], path, batch=True, enable_double_precision=True)
        onnx_model = onnx.load(path)
        print(
            verify(
                jax.vmap(model),
                onnx_model,
                [("B", STATE)],
                sizes={"B": [1, 8]},
                enable_double_precision=True,
            )
        )
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
