"""One inference worker process of a multi-worker coordinator (started by
`motor.coordinator.process.worker_supervisor`).

`python -m motor.coordinator.process.worker --spec FILE --index I --control-fd FD --state PATH`
serves the OpenAI API on the shared inference port (SO_REUSEPORT) and decode callbacks on its own port, and
takes its instance set from the supervisor over the control channel.
"""

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
from pathlib import Path

import uvloop
from prometheus_client import CollectorRegistry

from motor.coordinator.api.callback_listener import CallbackApp
from motor.coordinator.api.inference import inference_server
from motor.coordinator.api.limits import SharedState
from motor.coordinator.circuits.keeper import CircuitReporter
from motor.coordinator.core import Core
from motor.coordinator.http.server import coordinator_server, listen_socket, serve
from motor.coordinator.metrics import CoordinatorMetrics
from motor.coordinator.settings import CoordinatorSettings
from motor.protocol.instances import InstanceEvent
from motor.protocol.specs import CoordinatorSpec, load_spec
from motor.protocol.workers import (
    TO_WORKER,
    CircuitState,
    InstanceSetAck,
    LegOutcome,
    ToWorker,
    WorkerReady,
)
from motor.runtime.channel import Channel, open_channel
from motor.runtime.listeners import inherited

log = logging.getLogger("motor.coordinator.process.worker")


async def _follow_supervisor(core: Core, reporter: CircuitReporter, channel: Channel[ToWorker]) -> None:
    while True:
        message = await channel.receive()
        if message is None:
            return
        if isinstance(message, CircuitState):
            core.registry.set_open_circuits(frozenset(message.open))
            reporter.suspects = frozenset(message.suspects)
            continue
        core.registry.apply(InstanceEvent(event="set", instances=message.instances))
        channel.send(InstanceSetAck(version=message.version))
        await channel.drain()


async def run_worker(settings: CoordinatorSettings, index: int, control_fd: int, state_path: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    config = settings.config
    shared = SharedState(state_path)
    channel: Channel[ToWorker] | None = None

    def report_leg(instance_id: str, ok: bool) -> None:
        if channel is not None and not channel.closing:
            channel.send(LegOutcome(instance_id=instance_id, ok=ok))

    reporter = CircuitReporter(report_leg)
    core = Core(
        settings,
        CoordinatorMetrics(CollectorRegistry()),
        shared=shared,
        worker_index=index,
        circuit_reporter=reporter,
    )
    infer_socket = inherited("infer") or listen_socket(
        settings.bind_host, settings.infer_port, reuse_port=True
    )
    callback_socket = listen_socket(settings.bind_host, 0)
    callback_port = callback_socket.getsockname()[1]
    await core.start(f"http://{settings.advertise_host}:{callback_port}")
    channel = await open_channel(socket.socket(fileno=control_fd), TO_WORKER)
    servers = [
        (inference_server(core, settings.infer_tls), infer_socket),
        (coordinator_server(CallbackApp(core.callbacks), config), callback_socket),
    ]
    follower = asyncio.create_task(_follow_supervisor(core, reporter, channel))
    follower.add_done_callback(lambda _: stop.set())  # the supervisor is gone: stop too
    serving = asyncio.create_task(serve(servers, stop))
    while not all(server.started for server, _ in servers) and not serving.done():
        await asyncio.sleep(0.01)
    channel.send(WorkerReady(callback_port=callback_port))
    await channel.drain()
    log.info(
        "worker %d serving on %s:%d (callbacks on port %d)",
        index,
        settings.bind_host,
        settings.infer_port,
        callback_port,
    )
    try:
        await serving
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await core.stop()
        channel.close()
        shared.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m motor.coordinator.process.worker", description=__doc__)
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--index", required=True, type=int)
    parser.add_argument("--control-fd", required=True, type=int)
    parser.add_argument("--state", required=True, type=Path)
    args = parser.parse_args(argv)
    settings = CoordinatorSettings.from_spec(load_spec(args.spec, CoordinatorSpec), args.spec)
    logging.basicConfig(
        level=settings.config.logging_config.log_level,
        format=f"%(asctime)s %(levelname)s %(name)s[worker {args.index}]: %(message)s",
    )
    uvloop.run(run_worker(settings, args.index, args.control_fd, args.state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
