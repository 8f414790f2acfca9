"""The four services as processes for the benchmarks: started with an environment,
their output in a folder, stopped with SIGTERM (killed after 15 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

SERVICES = ("ingest", "quota", "victims", "actuator")


def service_env(url: str, prefix: str, scenario: Path, **settings: str) -> dict[str, str]:
    """This process's environment, the services pointed at the server and scenario, quiet
    (``BENCH_LOG_LEVEL`` to hear more), the project's default settings otherwise (what a
    user runs), and ``settings`` (``sim="false"`` sets ``GANGPREEMPT_SIM``)."""
    env = dict(os.environ)
    env.update(
        GANGPREEMPT_NATS_URL=url,
        GANGPREEMPT_PREFIX=prefix,
        GANGPREEMPT_SCENARIO=str(scenario),
        GANGPREEMPT_LOG_LEVEL=os.environ.get("BENCH_LOG_LEVEL", "warning"),
    )
    env.update({f"GANGPREEMPT_{k.upper()}": v for k, v in settings.items()})
    return env


def start_services(env: dict[str, str], logs: Path) -> dict[str, subprocess.Popen[bytes]]:
    """Start the four services; those named in ``BENCH_PROFILE`` (comma-separated) run
    under cProfile, their profile written to ``<logs>/<service>.prof`` when they stop."""
    profiled = set(os.environ.get("BENCH_PROFILE", "").split(","))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for service in SERVICES:
        log = open(logs / f"{service}.log", "ab")  # noqa: SIM115
        profile = ["-m", "cProfile", "-o", str(logs / f"{service}.prof")]
        procs[service] = subprocess.Popen(
            [
                sys.executable,
                *(profile if service in profiled else []),
                "-m",
                "gangpreempt.cli",
                "serve",
                service,
            ],
            env=env,
            stdout=log,
            stderr=log,
        )
        log.close()
    return procs


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) a live process has spent so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_services(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()


__all__ = ["SERVICES", "cpu_seconds", "service_env", "start_services", "stop_services"]
