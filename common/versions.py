"""Version stamps of the pure rule sets; each folds into the governance hash.

Bump a version whenever the behaviour it names changes, so rows produced under
different rules never share a governance hash.
"""

# v2: "member of <band>" is a bounded anchor; v3: issue 18's surfaces, ordinals, negated wh-questions
CLASSIFIER_VERSION = "quantifier-v3"
DENIAL_PATTERNS_VERSION = "v2"  # v2: 200+ phrasings, negation × verb × object (issue 18)
EXTRACTION_CUES_VERSION = "v2"  # v2: qualifiers such as "well known" leave subject tokens
MODEL_PROFILES_VERSION = "profiles-v2"  # v2: non-broad rungs keep the policy default cap
VERIFIER_VERSION = "verifier-v3"  # v3: the dry run demotes nothing; answer_brackets 0 in quote mode
PROMPT_VERSION = "prompt-v3"  # v2: reminder for broad questions only; v3: it asks for fewer grounded claims
CHUNKER_VERSION = "chunker-v1"
ROW_SCHEMA_VERSION = 1
