"""Tests for the gaugelab command: every command runs, verdicts print, errors are one line."""

import json

from typer.testing import CliRunner

from gaugelab.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_optimizers_lists_every_rule_with_its_claims():
    result = invoke("optimizers", "--details")
    assert result.exit_code == 0
    for rule in ("gd", "adam", "scalar-adam", "adam-p", "muon", "shampoo"):
        assert rule in result.output
    assert "singh2026lossbasis, Prop. 4.2(3)" in result.output  # muon's source, with --details


def test_check_adam_breaks_and_muon_is_equivariant():
    adam = invoke("check", "adam", "--steps", "3", "--draws", "2")
    assert adam.exit_code == 0 and "verdict: breaks" in adam.output
    muon = invoke("check", "muon", "--steps", "3", "--draws", "2")
    assert muon.exit_code == 0 and "verdict: equivariant" in muon.output
    assert "agrees with the claim" in muon.output


def test_check_torch_muon_is_not_certified_and_says_why():
    result = invoke("check", "torch.optim:Muon", "--steps", "3", "--draws", "2")
    assert result.exit_code == 0
    assert "verdict: equivariant" not in result.output
    assert "bfloat16" in result.output


def test_check_json_is_machine_readable():
    result = invoke("check", "scalar-adam", "--steps", "2", "--draws", "1", "--json")
    report = json.loads(result.output)
    assert report["verdict"] == "equivariant" and report["steps"] == 2
    assert report["distances"]["identity"] == [[0.0, 0.0]]


def test_check_passes_options_through():
    result = invoke("check", "adam-p", "--opt", "p=0", "--steps", "2", "--draws", "1",
                    "--group", "orthogonal", "--problem", "quadratic")  # fmt: skip
    assert result.exit_code == 0 and "verdict: equivariant" in result.output


def test_bad_input_gives_one_line_errors_and_exit_code_2():
    cases = [
        (("check", "adamm"), "unknown optimizer 'adamm' (did you mean adam, or adamw?)"),
        (("check", "sgd"), "unknown optimizer 'sgd' (did you mean gd, or torch.optim:SGD?)"),
        (("check", "xyz"), "unknown optimizer 'xyz'; known rules: adafactor"),
        (("check", "adam", "--opt", "lr=-1"), "error: --opt adam: lr=-1 is out of range"),
        (("check", "adam", "--opt", "lr=abc"), "error: --opt adam: lr='abc' is not a number"),
        (("check", "adam", "--opt", "betas=(0.9,2)"), "error: --opt adam: betas[1]=2"),
        (
            ("check", "adam", "--opt", "foo=1"),
            "error: --opt foo=…: adam has no such hyperparameter; allowed: lr, betas, eps\n",
        ),
        (("check", "adam", "--opt", "member_dims=2"), "error: --opt member_dims=…: adam has no"),
        (("check", "adam", "--opt", "lr"), "KEY=VALUE"),
        (("check", "adam", "--group", "bogus"), "error: --group 'bogus'; allowed: general-linear"),
        (("check", "adam", "--problem", "bogus"), "error: --problem 'bogus'; allowed: sensing"),
        (("check", "adam", "--steps", "0"), "error: --steps 0; allowed: an integer >= 1"),
        (("check", "adam", "--steps", "-1"), "error: --steps -1; allowed: an integer >= 1"),
        (("check", "adam", "--draws", "0"), "error: --draws 0; allowed: an integer >= 1"),
        (("check", "adam", "--dtype", "float16"), "--dtype 'float16'"),
        (("check", "no.such:Thing"), "cannot import module"),
        (("check", "gd", "--opt", "lr=1e6"), "diverged"),
        (("bench", "nosuch"), "unknown benchmark"),
    ]
    for args, fragment in cases:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert fragment in result.output, (args, result.output)
        assert "Traceback" not in result.output
        assert "check_equivariance" not in result.output  # the option, not the function


def test_version_is_the_installed_package_version():
    from importlib.metadata import version

    result = invoke("--version")
    assert result.exit_code == 0 and result.output == f"gaugelab {version('gaugelab')}\n"


def test_ctrl_c_during_check_prints_interrupted_and_exits_130(monkeypatch):
    import gaugelab.cli.check

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gaugelab.cli.check, "check_equivariance", interrupt)
    result = invoke("check", "adam")
    assert result.exit_code == 130, result.output
    assert result.stderr == "interrupted\n" and "Traceback" not in result.output


def test_a_long_check_prints_progress_lines_when_piped(monkeypatch):
    import time

    import gaugelab.cli._console
    import gaugelab.cli.check

    monkeypatch.setattr(gaugelab.cli._console, "PROGRESS_INTERVAL", 0.05)
    real = gaugelab.cli.check.check_equivariance

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(gaugelab.cli.check, "check_equivariance", slow)
    result = invoke("check", "scalar-adam", "--steps", "2", "--draws", "1", "--json")
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)  # stdout holds the report only
    lines = result.stderr.splitlines()
    assert len(lines) >= 2, result.stderr
    assert all(line.startswith("check: twins of scalar-adam under orthogonal on sensing: 00:0")
               for line in lines), lines  # fmt: skip
