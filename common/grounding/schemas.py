"""JSON schema of the claim_lattice answer, for servers that constrain output.

Sent as ``response_format={"type": "json_schema", ...}`` (vLLM's OpenAI-compatible
form; the old ``guided_json`` field was removed in vLLM 0.12) when the policy's
``structured_output`` is on, so a sweep can compare constrained and free JSON.
"""

from __future__ import annotations

from typing import Any

CLAIM_LATTICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "claim": {"type": "string"},
                    "evidence": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^E[0-9]+$"},
                    },
                    "warrant": {"type": "string"},
                },
                "required": ["claim", "evidence", "warrant"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["claims"],
    "additionalProperties": False,
}


def claim_lattice_response_format() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": "claim_lattice", "schema": CLAIM_LATTICE_SCHEMA, "strict": True},
    }
