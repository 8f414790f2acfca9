"""The four services as processes for the benchmarks: started with an environment,
their output in a folder, stopped with SIGTERM (killed after 15 s)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SERVICES = ("ingest", "quota", "victims", "actuator")


def start_services(env: dict[str, str], logs: Path) -> dict[str, subprocess.Popen[bytes]]:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for service in SERVICES:
        log = open(logs / f"{service}.log", "ab")  # noqa: SIM115
        procs[service] = subprocess.Popen(
            [sys.executable, "-m", "gangpreempt.cli", "serve", service],
            env=env,
            stdout=log,
            stderr=log,
        )
        log.close()
    return procs


def stop_services(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()


__all__ = ["SERVICES", "start_services", "stop_services"]
