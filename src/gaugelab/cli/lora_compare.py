"""`gaugelab lora compare` and `gaugelab lora compose`: subspace similarity and composition.

Heavy imports (torch, the experiments) happen inside the command functions, so that
``gaugelab --help`` stays fast.
"""

from __future__ import annotations

import typer


def register(group: typer.Typer) -> None:
    """Add this module's commands to ``group`` (none registered yet)."""
