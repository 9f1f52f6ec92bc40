"""Start a command as a terminal does, whatever started the test run."""

import signal


def as_foreground_job() -> None:
    """``preexec_fn`` for a command the test will Ctrl-C: SIGINT back to its default action.

    A test run started in the background by a non-interactive shell (``nohup …&``, some CI
    runners) inherits SIGINT *ignored*; Python then installs no KeyboardInterrupt handler and
    the command, rightly, does not react to the signal. A terminal's foreground job has it at
    its default.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
