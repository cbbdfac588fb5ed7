"""Version stamps of the pure rule sets; each folds into the governance hash.

Bump a version whenever the behaviour it names changes, so rows produced under
different rules never share a governance hash.
"""

# v2: "member of <band>" is a bounded anchor; v3: surfaces, ordinals, negated wh-questions;
# v4: sized universals, fixed-size sets, hedged numbers, negated "which X" ABSENT,
# adverbial ordinals, grammar-derived MANY/COMPREHENSIVE/OPEN_REQUEST surfaces
CLASSIFIER_VERSION = "quantifier-v5"
DENIAL_PATTERNS_VERSION = "v4"  # v2: 200+ phrasings; v3: a grammar of denial, partial denials skipped; v4: contractions, seed substrings, denials after a cited answer skipped
EXTRACTION_CUES_VERSION = "v4"  # v2: qualifiers leave subject tokens; v3: so do verbs in any form; v4: more plurals and who-cues
MODEL_PROFILES_VERSION = "profiles-v3"  # v2: non-broad rungs keep the policy default cap; v3: small-local
# v2: BROAD-CAPPED label, non-broad rungs keep the default cap; v3: the dry run demotes
# nothing, answer_brackets 0 in quote mode; v4: PROPORTIONAL keeps its profile cap, a sized
# universal ("all three") is capped at its number; v5: quote-mode prose beside a quote is an
# unbacked claim (NO_EVIDENCE_POINTER), a refusal phrase after "but" and a statement is a hedge
VERIFIER_VERSION = "verifier-v5"
PROMPT_VERSION = "prompt-v4"  # v2: reminder for broad questions only; v3: it asks for fewer grounded claims; v4: evidence capped with the claim cap, bounded reminder without the memory clause
# Folds into both hashes only while the policy's structured_output is on (runs without it
# keep the hashes they had before grammars existed).
GRAMMAR_VERSION = "grammar-v1"
CHUNKER_VERSION = "chunker-v1"
ROW_SCHEMA_VERSION = 1
