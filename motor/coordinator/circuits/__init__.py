"""Per-instance circuit breakers (`circuit_config`): the pure state (`breakers.py`) and the process that keeps
it, probes open circuits and tells every routing process which instances get no legs (`keeper.py`)."""
