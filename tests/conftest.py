pytest_plugins: list[str] = []
