pytest_plugins: list[str] = [
    "tests.fixtures.control",
    "tests.fixtures.etcd",
    "tests.fixtures.pool",
    "tests.fixtures.sim",
]
