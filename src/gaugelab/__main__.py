"""``python -m gaugelab``: the same as the ``gaugelab`` command."""

from gaugelab.cli import main

main()
