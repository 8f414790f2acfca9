"""``gangpreempt serve <service>``: run one service in this process."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from gangpreempt.config import load_settings


def serve(service: str, flags: dict[str, Any]) -> None:
    settings = load_settings(flags)  # a bad value raises InvalidInput naming the variable
    module = importlib.import_module(f"services.{service}.service")
    runtime = importlib.import_module("services.runtime")
    asyncio.run(runtime.run_service(service, settings, module.main))


__all__ = ["serve"]
