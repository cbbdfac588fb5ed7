"""Beside the farm: the simulator (a feature of the product, `qfarm.ops.sim`), the local model's
launcher, and deployment files."""

if not __name__.startswith("qfarm."):  # imported by its folder's bare name from a checkout
    raise ImportError(
        f"import qfarm.{__name__}, not {__name__}: the folder installs under the qfarm name"
        " (celery -A qfarm.worker, python -m qfarm.ops.sim); a process importing both would"
        " hold two copies of every module"
    )


# The public submodules (tests/test_public_surface.py pins them). farm (the supervisord
# driver) runs as ``python -m qfarm.ops.farm``, not imported.
__all__ = ["local", "search", "sim"]
