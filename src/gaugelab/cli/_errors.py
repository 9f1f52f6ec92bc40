"""How every command reports bad input: one unwrapped line on stderr and exit code 2."""

from __future__ import annotations

import typer
from pydantic import ValidationError


def fail(error: str | Exception) -> typer.Exit:
    """Print ``error: …`` (a pydantic error folded to one line) and return the exit to raise."""
    if isinstance(error, ValidationError):
        message = "; ".join(  # one clause per field, without pydantic's links
            f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg'].removeprefix('Value error, ')}"
            if e["loc"]
            else e["msg"].removeprefix("Value error, ")
            for e in error.errors()
        )
    else:
        message = str(error)
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)
