"""Tasks: deterministic problem instances given a seed."""

from gaugelab.tasks.sensing import MatrixSensing, factor_init, make_sensing

__all__ = ["MatrixSensing", "factor_init", "make_sensing"]
