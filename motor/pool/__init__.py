"""The KV-cache pool runtime: the `mooncake_master` process, its metrics and the store client.

`motor.kv.pool` plans the pool (pure); this package runs and talks to it.
"""
