"""deterministic() sets torch's switch without loading the compiler, and keeps the compiler's
own flag with it once the compiler is loaded (torch_compile)."""

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from gaugelab.determinism import deterministic, torch_compile

_FRESH = """
import json, sys
import torch
from gaugelab.determinism import deterministic
before = torch.are_deterministic_algorithms_enabled()
with deterministic():
    inside = torch.are_deterministic_algorithms_enabled()
after = torch.are_deterministic_algorithms_enabled()
print(json.dumps({"states": [before, inside, after],
                  "loaded": [m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules]}))
"""


def test_the_switch_is_set_and_restored_without_importing_the_compiler():
    done = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, check=True, timeout=120
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"states": [False, True, False], "loaded": []}


def test_the_previous_setting_and_warn_only_are_restored():
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with deterministic():
            assert torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_the_compiler_flag_follows_the_switch_once_the_compiler_is_loaded():
    import torch._inductor.config as compiler

    with deterministic():
        torch_compile(lambda x: x + 1)  # compiles lazily; only the flag is read here
        assert compiler.deterministic is True
    assert compiler.deterministic is False
    with deterministic():  # the compiler is loaded: the switch sets both from now on
        assert compiler.deterministic is True
    assert compiler.deterministic is False
    compiler.deterministic = True
    torch_compile(lambda x: x + 1)  # outside the block: synced to the switch
    assert compiler.deterministic is False


def test_each_aten_kernel_setting_compiles_into_a_cache_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items()
                                        if k != "TORCHINDUCTOR_CACHE_DIR"})  # fmt: skip
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    torch_compile(lambda x: x + 1)
    cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert Path(cache).name == f"torchinductor_{getpass.getuser()}_default", cache
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # the user's own is kept
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    torch_compile(lambda x: x + 1)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path)
