pytest_plugins: list[str] = [
    "tests.fixtures.sim",  # first: the control-plane and coordinator fixtures import it
    "tests.fixtures.control",
    "tests.fixtures.coordinator",
    "tests.fixtures.pki",
    "tests.fixtures.etcd",
    "tests.fixtures.pool",
    "tests.fixtures.prometheus",
]
