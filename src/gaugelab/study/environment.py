"""The environment a run is prepared or attempted in: machine, torch and Python versions, and the
git commit of the gaugelab checkout, with the digest the run store records per attempt."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

import gaugelab
from gaugelab.lazy import LazyModule

torch = LazyModule("torch")

__all__ = ["Machine", "current_environment", "environment_digest", "git_commit"]


class Machine(BaseModel):
    """The machine a run was prepared or attempted on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    platform: str = Field(description="platform.platform(), e.g. 'Linux-6.8-x86_64-with-glibc2.36'")
    architecture: str = Field(description="platform.machine(), e.g. 'x86_64'")
    processor: str = Field(description="platform.processor(); may be empty")
    cpu_count: int | None = Field(description="os.cpu_count(); None when unknown")

    @classmethod
    def current(cls) -> Machine:
        """This machine."""
        return cls(
            platform=platform.platform(),
            architecture=platform.machine(),
            processor=platform.processor(),
            cpu_count=os.cpu_count(),
        )


def current_environment() -> dict[str, Any]:
    """The environment of this process: ``torch_version``, ``python_version``, ``machine``.

    The torch version is read from the installed distribution's metadata, so store-only
    workers never import torch.
    """
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # a source build without metadata
        torch_version = str(torch.__version__)
    return {
        "torch_version": torch_version,
        "python_version": platform.python_version(),
        "machine": Machine.current().model_dump(),
    }


def environment_digest(environment: Mapping[str, Any] | None = None) -> str:
    """sha256 hex of the canonical JSON of an environment (the current one by default).

    Recorded per attempt, so a resumed or retried attempt on another machine or torch build is
    visible in the store.

    Args:
        environment: a mapping like :func:`current_environment`'s.
    """
    env = current_environment() if environment is None else dict(environment)
    text = json.dumps(env, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.cache
def git_commit() -> str | None:
    """The commit of the git checkout that holds the imported gaugelab package, if any.

    Runs ``git`` in the package directory (5 s timeout each) and returns ``HEAD`` only when the
    package's ``__init__.py`` is tracked by that repository (so an install inside some other
    repository, e.g. a virtualenv in a user's project, reports ``None``). Cached per process.

    Returns:
        40 (or 64, for SHA-256 repositories) lowercase hex characters, or ``None`` when git is
        missing, times out, or the package is not a tracked file of a checkout.
    """
    package = Path(gaugelab.__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=package,
                env=env,
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if git("ls-files", "--error-unmatch", "__init__.py") is None:
        return None
    head = git("rev-parse", "HEAD")
    if head is None or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", head):
        return None
    return head
