"""The coordinator's view of where KV blocks are: the engines' KV events (`subscriber.py`) kept in one index per
worker process, and the locator kv_cache_affinity asks (`locator.py`)."""
