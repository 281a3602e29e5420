import os

# Keras 3 runs on JAX in these tests; the backend is chosen once, when keras is first imported.
os.environ["KERAS_BACKEND"] = "jax"

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
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow (big models)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
