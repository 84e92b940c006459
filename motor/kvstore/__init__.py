"""The Mooncake store client: put and get KV bytes in the pool, the store config file it starts from, its errors
and its breaker for a master that is gone. A library of its own so that the engines use it without depending on
the pool runtime (`motor.pool`, which starts the master and reads its metrics).
"""
