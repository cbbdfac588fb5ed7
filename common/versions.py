"""Version stamps of the pure rule sets; each folds into the governance hash.

Bump a version whenever the behaviour it names changes, so rows produced under
different rules never share a governance hash.
"""

# v2: "member of <band>" is a bounded anchor; v3: issue 18's surfaces, ordinals, negated wh-questions
CLASSIFIER_VERSION = "quantifier-v3"
DENIAL_PATTERNS_VERSION = "v1"
EXTRACTION_CUES_VERSION = "v2"  # v2: qualifiers such as "well known" leave subject tokens
VERIFIER_VERSION = "verifier-v1"
PROMPT_VERSION = "prompt-v1"
CHUNKER_VERSION = "chunker-v1"
ROW_SCHEMA_VERSION = 1
