"""The KV-cache pool runtime: the `mooncake_master` process and its metrics.

`motor.kv.pool` plans the pool (pure), `motor.kvstore` is the client that puts and gets KV bytes in it; this
package runs the master and reads its metrics.
"""
