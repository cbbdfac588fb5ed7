"""The viewer's pages, one module each; ``qfarm.producer.viewer.router`` maps paths to them."""

# Its modules are the router's own (tests/test_public_surface.py pins them).
__all__: list[str] = []
