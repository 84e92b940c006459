"""KV pool throughput: motor's StoreClient against the raw Mooncake store API, side by side in one run.

One mooncake_master and two worker processes: an owner contributing a 512 MiB segment (it puts, and gets in
the same process) and a getter with global_segment_size 0 (it gets the owner's objects over loopback TCP).
Each worker sets up ONE native `MooncakeDistributedStore` and wraps it in a StoreClient (`StoreClient.adopt`),
so both modes use the same segment and connections and the ratio isolates motor's wrapper. Modes alternate
within every round (the order flips each round); the table shows the median round. Every round removes its
objects, so the pool stays under the eviction watermark.

A PNG of the motor/raw ratios goes to `--plot`.

    .venv/bin/python benchmarks/pool_throughput.py [--rounds 5] [--scale 1.0] [--plot benchmarks/out/pool_throughput.png]
"""

import argparse
import ctypes
import mmap
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from mooncake.store import MooncakeDistributedStore
from plotting import default_plot_path, figure, save, skipped_without_matplotlib

from motor.kv.pool import KvCachePoolConfig
from motor.kvstore.client import StoreClient
from motor.pool.master import MooncakeMaster
from motor.runtime.net import free_local_ports

MIB = 1 << 20
SEGMENT_SIZE = 512 * MIB
LOCAL_BUFFER_SIZE = 64 * MIB
SIZES = {"1 KiB": 1 << 10, "64 KiB": 64 << 10, "1 MiB": 1 << 20}
BASE_OPS = {1 << 10: 2000, 64 << 10: 1000, 1 << 20: 200}
MODES = ("raw", "motor")
WARMUP_OPS = 50
WORKER_STOP_TIMEOUT_S = 30.0
ROWS = (
    ("put", "1 process (segment owner)"),
    ("get", "1 process"),
    ("get over TCP", "2 processes (getter, no segment)"),
    ("put_from", "1 process, zero-copy"),
    ("get_into", "1 process, zero-copy"),
)

Operation = Callable[[list[str], bytes], None]


class RawOps:
    """The raw `MooncakeDistributedStore` calls, with the return-code checks any caller needs."""

    def __init__(self, store: MooncakeDistributedStore, address: int) -> None:
        self.store = store
        self.address = address

    def put(self, keys: list[str], value: bytes) -> None:
        put = self.store.put
        for key in keys:
            if put(key, value) != 0:
                raise RuntimeError(f"raw put {key} failed")

    def get(self, keys: list[str], value: bytes) -> None:
        get = self.store.get
        for key in keys:
            if not get(key):
                raise RuntimeError(f"raw get {key} missed")

    def put_from(self, keys: list[str], value: bytes) -> None:
        put_from, address, size = self.store.put_from, self.address, len(value)
        for key in keys:
            if put_from(key, address, size) != 0:
                raise RuntimeError(f"raw put_from {key} failed")

    def get_into(self, keys: list[str], value: bytes) -> None:
        get_into, address = self.store.get_into, self.address
        for key in keys:
            if get_into(key, address, MIB) < 0:
                raise RuntimeError(f"raw get_into {key} missed")


class MotorOps:
    """The same operations through motor's StoreClient."""

    def __init__(self, client: StoreClient) -> None:
        self.client = client
        self.buffer = client.register_buffer(MIB)

    def put(self, keys: list[str], value: bytes) -> None:
        put = self.client.put
        for key in keys:
            put(key, value)

    def get(self, keys: list[str], value: bytes) -> None:
        get = self.client.get
        for key in keys:
            if get(key) is None:
                raise RuntimeError(f"motor get {key} missed")

    def put_from(self, keys: list[str], value: bytes) -> None:
        put_from, buffer, size = self.client.put_from, self.buffer, len(value)
        for key in keys:
            put_from(key, buffer, size)

    def get_into(self, keys: list[str], value: bytes) -> None:
        get_into, buffer = self.client.get_into, self.buffer
        for key in keys:
            if get_into(key, buffer) is None:
                raise RuntimeError(f"motor get_into {key} missed")


def worker(store_config: dict[str, Any], commands: Connection) -> None:
    """Serve commands from the parent: (mode, operation, tag, size, count) -> seconds taken."""
    store = MooncakeDistributedStore()
    code = store.setup(
        "127.0.0.1",
        store_config["metadata_server"],
        store_config["global_segment_size"],
        store_config["local_buffer_size"],
        store_config["protocol"],
        store_config["device_name"],
        store_config["master_server_address"],
    )
    if code != 0:
        raise RuntimeError(f"store setup failed with {code}")
    raw_memory = mmap.mmap(-1, MIB)
    raw_address = ctypes.addressof(ctypes.c_char.from_buffer(raw_memory))
    if store.register_buffer(raw_address, MIB) != 0:
        raise RuntimeError("register_buffer failed")
    client = StoreClient.adopt(store, store_config)
    ops = {"raw": RawOps(store, raw_address), "motor": MotorOps(client)}
    try:
        while (command := commands.recv()) is not None:
            mode, operation, tag, size, count = command
            keys = [f"{tag}-{index}" for index in range(count)]
            value = bytes(range(256)) * (size // 256)
            if operation == "remove":
                for key in keys:
                    client.remove(key, force=True)
                commands.send(0.0)
                continue
            if operation == "put_from":
                raw_memory[:size] = value
                ops["motor"].buffer.view[:size] = value
            run: Operation = getattr(ops[mode], operation.removesuffix(" over TCP"))
            started = time.perf_counter()
            run(keys, value)
            commands.send(time.perf_counter() - started)
    finally:
        store.unregister_buffer(raw_address)
        client.close()


class Worker:
    def __init__(self, context: SpawnContext, store_config: dict[str, Any]) -> None:
        self.connection, child_end = context.Pipe()
        self.process: BaseProcess = context.Process(
            target=worker, args=(store_config, child_end), daemon=True
        )
        self.process.start()

    def run(self, mode: str, operation: str, tag: str, size: int, count: int) -> float:
        self.connection.send((mode, operation, tag, size, count))
        seconds: float = self.connection.recv()
        return seconds

    def stop(self) -> None:
        if self.process.is_alive():
            self.connection.send(None)
            self.process.join(WORKER_STOP_TIMEOUT_S)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(WORKER_STOP_TIMEOUT_S)


def measure_round(
    owner: Worker, getter: Worker, mode: str, tag: str, size: int, count: int
) -> dict[str, float]:
    """Seconds per operation for one mode's pass over `count` objects of `size` bytes."""
    zero_copy_tag = f"{tag}-zc"
    owner.run(mode, "put", f"{tag}-warmup", size, WARMUP_OPS)
    getter.run(mode, "get over TCP", f"{tag}-warmup", size, WARMUP_OPS)
    seconds = {
        "put": owner.run(mode, "put", tag, size, count),
        "get": owner.run(mode, "get", tag, size, count),
        "get over TCP": getter.run(mode, "get over TCP", tag, size, count),
    }
    owner.run(mode, "remove", f"{tag}-warmup", size, WARMUP_OPS)
    owner.run(mode, "remove", tag, size, count)
    seconds["put_from"] = owner.run(mode, "put_from", zero_copy_tag, size, count)
    seconds["get_into"] = owner.run(mode, "get_into", zero_copy_tag, size, count)
    owner.run(mode, "remove", zero_copy_tag, size, count)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds per mode (median shown)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the operation counts")
    parser.add_argument(
        "--plot", type=Path, default=default_plot_path("pool_throughput"), help="PNG to write"
    )
    args = parser.parse_args()
    counts = {size: max(WARMUP_OPS, int(base * args.scale)) for size, base in BASE_OPS.items()}
    if (counts[1 << 20] + WARMUP_OPS) * MIB > 0.8 * SEGMENT_SIZE:
        parser.error("--scale too large: a 1 MiB round would cross the eviction watermark")

    rpc_port, metrics_port = free_local_ports(2)
    pool = KvCachePoolConfig(
        protocol="tcp",
        global_segment_size=SEGMENT_SIZE,
        local_buffer_size=LOCAL_BUFFER_SIZE,
        port=rpc_port,
        metrics_port=metrics_port,
    )
    log_dir = tempfile.TemporaryDirectory(prefix="pool-bench-")
    with log_dir, MooncakeMaster(pool, "127.0.0.1", Path(log_dir.name) / "mooncake_master.log") as master:
        samples = measure(master, args.rounds, counts)
    print_table(samples, counts, args.rounds)
    plot(samples, args.plot)


def measure(
    master: MooncakeMaster, rounds: int, counts: dict[int, int]
) -> dict[tuple[str, int, str], list[float]]:
    """ops/s per (mode, size, operation), one entry per round."""
    context = multiprocessing.get_context("spawn")
    owner_config = master.store_config()
    owner = Worker(context, owner_config)
    getter = Worker(context, owner_config | {"global_segment_size": 0})
    samples: dict[tuple[str, int, str], list[float]] = {}
    try:
        for round_index in range(rounds):
            order = MODES if round_index % 2 == 0 else MODES[::-1]
            for size in SIZES.values():
                for mode in order:
                    tag = f"{mode}-{size}-{round_index}"
                    passes = measure_round(owner, getter, mode, tag, size, counts[size])
                    for operation, seconds in passes.items():
                        samples.setdefault((mode, size, operation), []).append(counts[size] / seconds)
    finally:
        getter.stop()
        owner.stop()
    return samples


def print_table(
    samples: dict[tuple[str, int, str], list[float]], counts: dict[int, int], rounds: int
) -> None:
    print(
        f"KV pool throughput, loopback TCP, {multiprocessing.cpu_count()} cores; medians of {rounds} rounds "
        "(raw and motor alternate; motor/raw is the median per-round ratio); objects per round: "
        + ", ".join(f"{name} x{counts[size]}" for name, size in SIZES.items())
    )
    header = (
        f"{'size':>6} | {'operation':<12} | {'where':<32} | {'raw ops/s':>9} | {'motor ops/s':>11} | "
        f"{'raw MiB/s':>9} | {'motor MiB/s':>11} | {'motor/raw':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, size in SIZES.items():
        for operation, where in ROWS:
            raw_rounds = samples[("raw", size, operation)]
            motor_rounds = samples[("motor", size, operation)]
            raw, motor = statistics.median(raw_rounds), statistics.median(motor_rounds)
            # Rounds pair up adjacent raw and motor passes, so the paired ratio cancels most machine drift.
            ratio = statistics.median(m / r for m, r in zip(motor_rounds, raw_rounds, strict=True))
            print(
                f"{name:>6} | {operation:<12} | {where:<32} | {raw:>9.0f} | {motor:>11.0f} | "
                f"{raw * size / MIB:>9.1f} | {motor * size / MIB:>11.1f} | {ratio:>9.2f}"
            )


@skipped_without_matplotlib
def plot(samples: dict[tuple[str, int, str], list[float]], path: Path) -> None:
    """motor/raw per operation and size: the per-round paired ratios (dots) and their median (bar)."""
    fig, axes = figure(1, 1, width=9)
    ax = axes[0][0]
    width = 0.8 / len(SIZES)
    for offset, (name, size) in enumerate(SIZES.items()):
        for index, (operation, _) in enumerate(ROWS):
            ratios = [
                m / r
                for m, r in zip(
                    samples[("motor", size, operation)], samples[("raw", size, operation)], strict=True
                )
            ]
            x = index + (offset - (len(SIZES) - 1) / 2) * width
            ax.bar(
                x, statistics.median(ratios), width, color=f"C{offset}", label=name if index == 0 else None
            )
            ax.scatter([x] * len(ratios), ratios, color="black", s=6, zorder=3)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(ROWS)), [operation for operation, _ in ROWS])
    ax.set_ylabel("motor ops/s ÷ raw ops/s (paired rounds)")
    ax.set_title("StoreClient overhead over the raw Mooncake store")
    ax.legend(title="object size")
    save(fig, path)


if __name__ == "__main__":
    main()
