pytest_plugins: list[str] = [
    "tests.fixtures.control",
    "tests.fixtures.coordinator",
    "tests.fixtures.pki",
    "tests.fixtures.etcd",
    "tests.fixtures.pool",
    "tests.fixtures.prometheus",
    "tests.fixtures.sim",
]
