"""Deterministic verification of model answers; no I/O, no model calls.

The rules: docs/grounding.md, 'Verification'.

``text`` normalization and tokens, ``claims`` extraction per mode, ``checks``
per claim, ``quote`` layered matching, ``verdict`` verdict/label/tails, and
``verifier.verify_answer`` tying them together.
"""

from qfarm.common.grounding.verify.verifier import DEFLECTION_PATTERNS, verify_answer

__all__ = ["DEFLECTION_PATTERNS", "verify_answer"]
