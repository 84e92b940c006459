"""The coordinator's HTTP APIs as raw ASGI apps: the OpenAI API (inference.py), management (management.py) and
the decode_first callback listener (callback_listener.py), with what they check before a request is
dispatched: API keys (auth.py), rate and in-flight limits (limits.py), health and version (health.py)."""
