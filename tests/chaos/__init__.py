"""The chaos harness: a real local cluster (examples/sim, 2 prefill + 2 decode, the real mooncake_master and
etcd), bounded open-loop load checked against the sim's oracle, and one fault after another (docs/chaos.md).
The modules here are shared by the CI-sized tests in this directory and by benchmarks/chaos.py."""
