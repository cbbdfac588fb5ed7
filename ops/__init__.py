"""Beside the farm: the simulator (a feature of the product, `ops.sim`), the local model's
launcher, and deployment files."""
