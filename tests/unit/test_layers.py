"""The pure core imports no I/O, no asyncio, no logging or telemetry, and no services."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CORE = ("model", "manifests", "quota", "preemption", "placement", "planning", "simulation")
FORBIDDEN = (
    "asyncio",
    "nats",
    "kubernetes_asyncio",
    "structlog",
    "opentelemetry",
    "services",
    "socket",
    "subprocess",
    "logging",
    "gangpreempt.cli",
    "gangpreempt.bus",
    "gangpreempt.telemetry",
)
LIB = Path(__file__).resolve().parents[2] / "libs" / "gangpreempt"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("package", CORE)
def test_core_does_no_io(package: str) -> None:
    files = sorted((LIB / package).rglob("*.py"))
    assert files
    for path in files:
        for module in imported_modules(path):
            for banned in FORBIDDEN:
                where = f"{path.relative_to(LIB)} imports {module}: the core must stay pure"
                assert module != banned, where
                assert not module.startswith(banned + "."), where
