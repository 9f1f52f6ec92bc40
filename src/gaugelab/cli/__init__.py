"""The ``gaugelab`` command (typer + rich). Thin: every command calls one public function."""

from gaugelab.cli.app import app, main

__all__ = ["app", "main"]
