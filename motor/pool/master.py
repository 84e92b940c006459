"""Supervise `mooncake_master`: find the binary, start it, wait until it serves, stop it by pid."""

import errno
import os
import shutil
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from motor.kv.pool import KvCachePoolConfig, engine_store_config, master_args, metrics_url
from motor.pool.metrics import MetricsUnavailable, fetch_metrics_text
from motor.runtime.logs import LogFile, tail
from motor.runtime.net import accepts_connections, try_bind
from motor.runtime.processes import Child, spawn

BINARY_NAME = "mooncake_master"
INSTALL_HINT = (
    "install the pip package `mooncake-transfer-engine-non-cuda` into the Python environment motor runs in "
    "(it provides the mooncake_master binary) and the Debian package `libibverbs1` it links against "
    "(`apt-get install libibverbs1`)"
)
_WILDCARD_HOSTS = {"", "0.0.0.0", "::"}
_POLL_INTERVAL_S = 0.02
_LOG_TAIL_LINES = 20
_LOG_LINE_LIMIT = 400


class MasterError(RuntimeError):
    """mooncake_master could not be found, started or reached."""


def find_master_binary() -> Path:
    """The `mooncake_master` next to the running interpreter (its venv), else the one on PATH."""
    beside_python = Path(sys.executable).parent / BINARY_NAME
    if os.access(beside_python, os.X_OK):
        return beside_python
    on_path = shutil.which(BINARY_NAME)
    if on_path is not None:
        return Path(on_path)
    raise MasterError(f"{BINARY_NAME} was found neither next to {sys.executable} nor on PATH; {INSTALL_HINT}")


class MooncakeMaster:
    """One `mooncake_master` child process serving the pool `pool` describes.

    RPC and metrics bind to `bind_host` (local mode: 127.0.0.1); output goes to `log_path`.
    """

    def __init__(
        self,
        pool: KvCachePoolConfig,
        bind_host: str,
        log_path: Path,
        *,
        binary: Path | None = None,
        startup_timeout_s: float = 15.0,
        stop_grace_s: float = 5.0,
    ) -> None:
        self.pool = pool
        self.bind_host = bind_host
        self.log_path = log_path
        self._binary = binary
        self._startup_timeout_s = startup_timeout_s
        self._stop_grace_s = stop_grace_s
        self._process: Child | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    @property
    def client_host(self) -> str:
        """The address clients dial: `bind_host`, or loopback when the master binds every interface."""
        return "127.0.0.1" if self.bind_host in _WILDCARD_HOSTS else self.bind_host

    @property
    def rpc_address(self) -> str:
        return f"{self.client_host}:{self.pool.port}"

    @property
    def metrics_url(self) -> str:
        return metrics_url(self.pool, master_host=self.client_host)

    def store_config(self) -> dict[str, Any]:
        """The engine store config (`MOONCAKE_CONFIG_PATH` JSON) pointing at this master."""
        return engine_store_config(self.pool, master_host=self.client_host)

    def start(self) -> None:
        """Start the master and return once its RPC port accepts connections and /metrics answers."""
        if self.running:
            raise MasterError(f"{BINARY_NAME} is already running (pid {self.pid}); stop() it first")
        self._check_ports()
        binary = self._binary or find_master_binary()
        command = [str(binary), *master_args(self.pool, bind_host=self.bind_host)]
        try:
            self._process = spawn(command, log=LogFile(self.log_path, truncate=True))
        except OSError as exc:
            raise MasterError(f"cannot execute {binary}: {exc}; {INSTALL_HINT}") from exc
        try:
            self._wait_until_serving(self._process)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace period; waits for the process to be gone."""
        if self._process is not None:
            self._process.stop(self._stop_grace_s)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _check_ports(self) -> None:
        if self.pool.port == self.pool.metrics_port:
            raise MasterError(
                f"kv_cache_pool_config.port and metrics_port are both {self.pool.port}; give them different "
                "ports"
            )
        for field, port in (("port", self.pool.port), ("metrics_port", self.pool.metrics_port)):
            try:
                try_bind(self.bind_host, port)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise MasterError(
                        f"{self.bind_host}:{port} (kv_cache_pool_config.{field}) is already in use; stop the "
                        f"process listening there or choose another {field}"
                    ) from exc
                raise MasterError(
                    f"cannot bind {self.bind_host}:{port} (kv_cache_pool_config.{field}): {exc.strerror}; "
                    "bind_host must be an address of this machine (127.0.0.1 in local mode)"
                ) from exc

    def _wait_until_serving(self, process: Child) -> None:
        deadline = time.monotonic() + self._startup_timeout_s
        rpc_ready = metrics_ready = False
        while True:
            returncode = process.exit_code()
            if returncode is not None:
                raise self._startup_failure(f"exited with code {returncode} during startup")
            rpc_ready = rpc_ready or accepts_connections(self.client_host, self.pool.port, timeout_s=0.5)
            if rpc_ready and not metrics_ready:
                try:
                    fetch_metrics_text(self.metrics_url, timeout_s=1.0)
                    metrics_ready = True
                except MetricsUnavailable:
                    pass
            if rpc_ready and metrics_ready and process.running:
                return
            if time.monotonic() >= deadline:
                waiting_for = "RPC port" if not rpc_ready else "metrics endpoint"
                raise self._startup_failure(
                    f"did not serve within {self._startup_timeout_s:g} s (still waiting for the {waiting_for})"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _startup_failure(self, what: str) -> MasterError:
        last_lines = tail(self.log_path, _LOG_TAIL_LINES, line_limit=_LOG_LINE_LIMIT)
        hint = f"; {INSTALL_HINT}" if "error while loading shared libraries" in last_lines else ""
        return MasterError(
            f"{BINARY_NAME} (pid {self.pid}, rpc {self.rpc_address}, metrics {self.metrics_url}) "
            f"{what}{hint}.\n"
            f"Last lines of {self.log_path}:\n{last_lines}"
        )
