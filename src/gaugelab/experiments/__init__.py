"""Experiments: declarative specs and runners that compose the layers above.

* :mod:`~gaugelab.experiments.zoo` — the matrix-sensing optimizer zoo (PROTOCOLS §3);
* :mod:`~gaugelab.experiments.dial` — the Adam-p dial (PROTOCOLS §4);
* :mod:`~gaugelab.experiments.sensing_report` — their tables, figures and HTML reports;
* :mod:`~gaugelab.experiments.twins` — the attention-head twin study (PROTOCOLS §5).
"""

from gaugelab.experiments.dial import DialResult, DialSpec, run_dial
from gaugelab.experiments.sensing_report import dial_report, zoo_report
from gaugelab.experiments.zoo import LearningRateGrids, ZooResult, ZooSpec, run_zoo

__all__ = [
    "DialResult",
    "DialSpec",
    "LearningRateGrids",
    "ZooResult",
    "ZooSpec",
    "dial_report",
    "run_dial",
    "run_zoo",
    "zoo_report",
]
