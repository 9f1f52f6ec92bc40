"""gaugelab: optimizer geometry on factored models.

Layers (each imports only from the ones before it): ``linalg`` (numerics), ``gauge`` (symmetry
groups and their actions), ``optim`` (the optimizer zoo), ``equivariance`` (certificates and
closed forms), ``cli`` (the ``gaugelab`` command).
"""

from gaugelab.errors import NonFiniteError

__version__ = "0.2.0"

__all__ = ["NonFiniteError", "__version__"]
