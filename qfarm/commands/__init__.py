"""One module per subcommand; each exposes ``register(subparsers)``."""

# The public submodules (tests/test_public_surface.py pins them). Every command module is the
# CLI's own: nothing outside qfarm imports them.
__all__: list[str] = []
