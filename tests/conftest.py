import pytest

from tests.installs import MISSING_MARK

pytest_plugins: list[str] = [
    "tests.fixtures.sim",  # first: the control-plane and coordinator fixtures import it
    "tests.fixtures.control",
    "tests.fixtures.coordinator",
    "tests.fixtures.pki",
    "tests.fixtures.etcd",
    "tests.fixtures.pool",
    "tests.fixtures.prometheus",
]


def pytest_runtest_setup(item: pytest.Item) -> None:
    missing = item.get_closest_marker(MISSING_MARK)
    if missing is not None:
        pytest.fail(missing.args[0], pytrace=False)
