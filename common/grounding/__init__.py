"""Grounding: how an answer is tied to its evidence, from the question to the row.

The quantifier classifier and preflight (how many things a question asks for, and
the cap on claims), the prompts and the quantifier reminder, the deterministic
verifier (``verify/``), the answerability sidecar and its denial grammar, gold-answer
matching, each mode's answer grammar (structured output), and the finished job's ``Row``.
The rules: docs/grounding.md.
"""

# The public submodules (tests/test_public_surface.py pins them). denials (the sidecar's
# grammar) and reminders (a prompt turn) serve this package only.
__all__ = [
    "gold", "grammars", "names", "preflight", "prompts", "quantifier", "rows", "sidecar", "verify",
]
