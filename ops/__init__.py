"""Beside the farm: the simulator (a feature of the product, `qfarm.ops.sim`), the local model's
launcher, and deployment files."""

# The public submodules (tests/test_public_surface.py pins them). farm (the supervisord
# driver) runs as ``python -m qfarm.ops.farm``, not imported.
__all__ = ["local", "sim"]
