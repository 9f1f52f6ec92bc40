"""Where a sweep's runs execute: this process, a local process pool, or Ray.

* ``local`` — Where a sweep's runs execute: in this process, or on a local process pool (Ray:
  :mod:`gaugelab.study.executors.ray`).
* ``ray`` — The Ray backend of :func:`gaugelab.study.run_sweep`: runs as Ray tasks of one CPU
  each.
"""
