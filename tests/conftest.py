pytest_plugins: list[str] = [
    "tests.fixtures.control",
    "tests.fixtures.etcd",
]
