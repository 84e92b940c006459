import socket
import stat
import sys
from pathlib import Path

import pytest

from motor.kv.pool import KvCachePoolConfig
from motor.pool.master import MasterError, MooncakeMaster, find_master_binary
from motor.pool.metrics import scrape_pool
from motor.runtime.net import accepts_connections, free_local_ports
from tests.fixtures.pool import RunningPool, StartPool


def pool_on_free_ports() -> KvCachePoolConfig:
    rpc_port, metrics_port = free_local_ports(2)
    return KvCachePoolConfig(protocol="tcp", port=rpc_port, metrics_port=metrics_port)


def test_master_serves_rpc_and_metrics_on_loopback_then_stops(mooncake_master: RunningPool) -> None:
    master = mooncake_master.master
    pid = master.pid

    assert pid is not None and master.running
    assert accepts_connections("127.0.0.1", mooncake_master.pool.port, timeout_s=1.0)
    assert scrape_pool(mooncake_master.metrics_url).key_count == 0
    assert mooncake_master.store_config["master_server_address"] == f"127.0.0.1:{mooncake_master.pool.port}"
    assert "--rpc_address=127.0.0.1" in Path(f"/proc/{pid}/cmdline").read_text()

    master.stop()

    assert not master.running
    assert not Path(f"/proc/{pid}").exists()
    assert not accepts_connections("127.0.0.1", mooncake_master.pool.port, timeout_s=1.0)


def test_master_passes_the_pool_settings(start_mooncake_master: StartPool) -> None:
    running = start_mooncake_master(default_kv_lease_ttl=1234, eviction_high_watermark_ratio=0.8)

    cmdline = Path(f"/proc/{running.master.pid}/cmdline").read_text().split("\0")

    assert "--default_kv_lease_ttl=1234" in cmdline
    assert "--eviction_high_watermark_ratio=0.8" in cmdline
    assert f"--metrics_port={running.pool.metrics_port}" in cmdline


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with MooncakeMaster(pool_on_free_ports(), "127.0.0.1", tmp_path / "master.log") as master:
        pid = master.pid
        assert master.running

    assert pid is not None and not Path(f"/proc/{pid}").exists()
    assert (tmp_path / "master.log").stat().st_size > 0


def test_second_start_is_refused(mooncake_master: RunningPool) -> None:
    with pytest.raises(MasterError, match=f"already running \\(pid {mooncake_master.master.pid}\\)"):
        mooncake_master.master.start()


def test_busy_port_is_named_before_starting(tmp_path: Path) -> None:
    pool = pool_on_free_ports()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", pool.metrics_port))
        squatter.listen()
        master = MooncakeMaster(pool, "127.0.0.1", tmp_path / "master.log")

        with pytest.raises(
            MasterError,
            match=rf"127\.0\.0\.1:{pool.metrics_port} \(kv_cache_pool_config\.metrics_port\) is already in use",
        ):
            master.start()

    assert master.pid is None


def test_same_port_for_rpc_and_metrics_is_refused(tmp_path: Path) -> None:
    port = free_local_ports(1)[0]
    master = MooncakeMaster(KvCachePoolConfig(port=port, metrics_port=port), "127.0.0.1", tmp_path / "m.log")

    with pytest.raises(MasterError, match="give them different ports"):
        master.start()


def test_startup_timeout_stops_the_process_and_shows_the_log(tmp_path: Path) -> None:
    master = MooncakeMaster(pool_on_free_ports(), "127.0.0.1", tmp_path / "master.log", startup_timeout_s=0.0)

    with pytest.raises(MasterError, match=r"did not serve within 0 s .*\nLast lines of .*master\.log"):
        master.start()

    assert master.pid is not None and not master.running


def test_binary_that_fails_to_load_gets_the_install_hint(tmp_path: Path) -> None:
    # Reproduces what the dynamic loader prints when libibverbs1 is missing; the real binary cannot be made to
    # miss a system library without root.
    binary = tmp_path / "mooncake_master"
    binary.write_text(
        "#!/bin/sh\n"
        'echo "$0: error while loading shared libraries: libibverbs.so.1: cannot open shared object file" >&2\n'
        "exit 127\n"
    )
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    master = MooncakeMaster(pool_on_free_ports(), "127.0.0.1", tmp_path / "master.log", binary=binary)

    with pytest.raises(MasterError) as caught:
        master.start()

    message = str(caught.value)
    assert "exited with code 127 during startup" in message
    assert "libibverbs.so.1" in message
    assert "mooncake-transfer-engine-non-cuda" in message and "apt-get install libibverbs1" in message


def test_binary_is_found_next_to_the_interpreter() -> None:
    assert find_master_binary() == Path(sys.executable).parent / "mooncake_master"


def test_missing_binary_names_the_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(MasterError) as caught:
        find_master_binary()

    message = str(caught.value)
    assert "mooncake_master was found neither next to" in message
    assert "mooncake-transfer-engine-non-cuda" in message and "libibverbs1" in message


def test_wildcard_bind_is_dialled_on_loopback(tmp_path: Path) -> None:
    master = MooncakeMaster(pool_on_free_ports(), "0.0.0.0", tmp_path / "m.log")

    assert master.client_host == "127.0.0.1"
    assert master.metrics_url.startswith("http://127.0.0.1:")
