import os

# Keras 3 runs on JAX in these tests; the backend is chosen once, when keras is first imported.
os.environ["KERAS_BACKEND"] = "jax"
# Four CPU devices, for the sharded programs (meshes of 1, 2 and 4 devices) and weights on
# another device than the default one. Read when JAX first starts its CPU backend, which no
# import before this file does; the default device stays cpu:0, so other tests are unchanged.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "quick", max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", help="also run tests marked slow (big models)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The skipped tests counted by reason (``-q`` shows only their number): a run that
    skips the onnxruntime-web tests says so, and which command adds them."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        terminalreporter.section("skipped, by reason")
        for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{count:5d}  {reason}")
