"""Latency of a data-dependent while_loop as ONNX Loop vs bounded by ``loop_bound=`` (a Scan).

The float64 heat equation of examples/heat_equation.py (a while_loop until ``t_end``, its number
of steps computed from the data) on its 41-point grid (40 steps) and a 101-point one (250 steps):
the Loop form on onnxruntime (tract has no Loop), and the bounded form with ``loop_bound`` the
steps needed and twice that, its step an If on the condition (the onnxruntime profile) or a
Where-select of old and new carries (the tract profile), on onnxruntime and tract. Decides
``bounded_if`` of the target profiles (core/targets/). Run ``python -m benchmarks.bounded_while``;
prints the median of 500 runs per form (the forms of one size interleaved, 5 rounds of 100).
"""

from __future__ import annotations

import dataclasses
import importlib
import time
import warnings
from typing import Any

import numpy as np

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.core.runtimes import open_session
from jax2onnx_nn.core.targets import TARGETS

SPECS = [(("N",), "float64"), ((), "float64"), ((), "float64")]
OPTIONS = {"enable_double_precision": True, "constraints": ("N >= 3",)}


def medians_ms(
    sessions: dict[str, Any], feeds: list[np.ndarray], rounds: int = 5, runs: int = 100
) -> dict[str, float]:
    """The median latency of each session, the sessions run in turns (drift hits all alike)."""
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            for _ in range(runs):
                start = time.perf_counter()
                session(feeds)
                times[name].append(time.perf_counter() - start)
    return {name: 1e3 * float(np.median(t)) for name, t in times.items()}


def main() -> None:
    heat = importlib.import_module("examples.heat_equation")
    for points in (41, 101):
        with x64(True):
            feeds = [np.asarray(heat.initial_condition(points)), np.array(0.5), np.array(0.02)]
            trips = int(heat.heat_solve(*feeds)[1])
        forms: dict[tuple[str, str], tuple[Any, int | None]] = {
            ("Loop", "onnxruntime"): (TARGETS["onnxruntime"], None)
        }
        for bound in (trips, 2 * trips):
            for runtime in ("onnxruntime", "tract"):
                profile = TARGETS[runtime]
                forms[(f"loop_bound={bound}, If step", runtime)] = (
                    dataclasses.replace(profile, bounded_if=True),
                    bound,
                )
                forms[(f"loop_bound={bound}, Where step", runtime)] = (
                    dataclasses.replace(profile, bounded_if=False),
                    bound,
                )
        sessions: dict[str, Any] = {}
        for (name, runtime), (target, bound) in forms.items():
            with x64(True), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (the step count is an int: not poisoned)
                model = to_onnx(heat.heat_solve, SPECS, target=target, loop_bound=bound, **OPTIONS)
            try:
                session = open_session(model, runtime)
                session(feeds)
                sessions[f"{name} on {runtime}"] = session
            except Exception as err:
                print(f"{points} points, {name} on {runtime}: fails ({str(err).splitlines()[0]})")
        for name, ms in medians_ms(sessions, feeds).items():
            print(f"{points} points ({trips} steps), {name}: {ms:.3f} ms")


if __name__ == "__main__":
    main()
