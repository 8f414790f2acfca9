"""The ``gangpreempt`` command line."""

from gangpreempt.cli.main import cli, main

__all__ = ["cli", "main"]
