"""Spectra of an update: rank policies, factor-space SVD, reconstruction and truncation (seed 003
§0x04).

* ``covariance`` — Sampled input covariance, its support and blind spot, and the output residual.
* ``factored`` — Updates given densely or as factors ``s·B A``, their SVD in factor space, and the
  record of how an SVD was computed.
* ``ranks`` — Rank policies: configured, algebraic, numerical, stable, energy and entropy effective
  rank.
* ``reconstruction`` — Reconstruction: what rank ``r`` can approximate, in weight space and on
  sampled inputs.
* ``spectrum`` — Spectra with provenance and rank reports: what every rank policy reads and
  returns.

The public names of ``ranks``, ``spectrum``, ``factored``, ``reconstruction``, ``covariance`` are
re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(
    __name__, "ranks", "spectrum", "factored", "reconstruction", "covariance"
)
