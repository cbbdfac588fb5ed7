"""Each mode's output contract as a grammar the server enforces while decoding.

With the policy's ``structured_output`` on, every job's request carries one GBNF
grammar (docs/llm.md, 'Structured output'): llama.cpp's server reads it as
``grammar``, vLLM as ``structured_outputs={"grammar": ...}`` (its grammar
backends read the same notation). The grammar is built per job from what the
prompt offers, so the model can only write:

* ``quote``: lines ``"quoted text" [E3]``;
* ``claim_lattice_pointer``: lines ``claim text [E2]`` or ``claim text [E2, E5]``;
* ``claim_lattice``: ``{"claims": [{"claim": "...", "evidence": ["E2"], "warrant": "..."}]}``

with evidence ids limited to the blocks shown in the prompt, at most
``max_ids_per_claim`` ids per claim, and between one and ``max_claims`` claims.
The grammar fixes the form only: what the text says, and whether a quote or a
warrant is really in the evidence, is still the verifier's to judge, exactly as
without a grammar.

Pure: no I/O, the same inputs give the same grammar byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

from qfarm.common.models import Mode

# Text lengths (characters) a claim, quote or warrant may take. The floor keeps a claim
# above the verifier's three content tokens' worth of characters; the ceiling makes a
# model that would ramble inside one string close it, so the next line (or the JSON's
# closing brackets) still fits in the token budget.
MIN_TEXT_CHARS = 12
MAX_TEXT_CHARS = 240

# JSON string characters: anything but a quote, a backslash or a control character,
# or one of JSON's short escapes (no \u: a small model loops in hex digits).
_JSON_CHAR = r'[^"\\\x00-\x1F] | "\\" ["\\/bfnrt]'
_NEWLINE = '"\\n"'  # the GBNF literal of a line break
_COMMA = '", "'


def _bounded(item: str, sep: str, most: int) -> str:
    """``item`` one to ``most`` times, ``sep`` between: nested optionals, which every
    GBNF reader takes (no reliance on ``{m,n}`` for a count the policy sets)."""
    tail = ""
    for _ in range(most - 1):
        tail = f"( {sep} {item} {tail})? "
    return f"{item} {tail}".strip()


def _id_rule(evidence_ids: Sequence[str]) -> str:
    return "id ::= " + " | ".join(f'"{eid}"' for eid in evidence_ids)


def answer_grammar(
    mode: Mode,
    evidence_ids: Sequence[str],
    *,
    max_claims: int,
    max_ids_per_claim: int,
) -> str | None:
    """The GBNF grammar of ``mode``'s answer over ``evidence_ids``; None when the prompt
    shows no evidence (no id to cite: the model is left free to say so)."""
    ids = list(dict.fromkeys(evidence_ids))
    if not ids:
        return None
    max_claims = max(1, max_claims)
    per_claim = max(1, min(max_ids_per_claim, len(ids)))
    text_range = f"{{{MIN_TEXT_CHARS},{MAX_TEXT_CHARS}}}"
    if mode is Mode.QUOTE:
        rules = [
            f"root ::= {_bounded('line', _NEWLINE, max_claims)}",
            'line ::= "\\"" quoted "\\" [" id "]"',
            f'quoted ::= [^"\\n]{text_range}',
        ]
    elif mode is Mode.CLAIM_LATTICE_POINTER:
        rules = [
            f"root ::= {_bounded('line', _NEWLINE, max_claims)}",
            'line ::= claim " [" ids "]"',
            # A claim starts with a visible character and holds no bracket: the tag is
            # the only bracketed text on the line.
            f"claim ::= [^ \\n\\[\\]] [^\\n\\[\\]]{{{MIN_TEXT_CHARS - 1},{MAX_TEXT_CHARS - 1}}}",
            f"ids ::= {_bounded('id', _COMMA, per_claim)}",
        ]
    else:
        rules = [
            'root ::= "{\\"claims\\": [" ' + _bounded("claim", '", "', max_claims) + ' "]}"',
            'claim ::= "{\\"claim\\": \\"" text "\\", \\"evidence\\": [" ids '
            '"], \\"warrant\\": \\"" text "\\"}"',
            f"ids ::= {_bounded('qid', _COMMA, per_claim)}",
            'qid ::= "\\"" id "\\""',
            f"text ::= char{text_range}",
            f"char ::= {_JSON_CHAR}",
        ]
    return "\n".join([*rules, _id_rule(ids)]) + "\n"


def max_claims_for(policy_default: int, claim_cap: int | None, cap_enforced: bool) -> int:
    """The claims a grammar admits: the guard's cap where it is enforced, else the policy's
    default (the verifier's own bound), so an unenforced cap changes no answer (the
    dry-run discipline)."""
    if cap_enforced and claim_cap is not None:
        return claim_cap
    return policy_default
