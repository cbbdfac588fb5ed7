"""Structured-output fields as vLLM 0.33 reads them, checked as it checks them.

``structured_outputs`` takes exactly one of ``json``, ``regex``, ``choice``,
``grammar``, ``json_object``, ``structural_tag`` (``StructuredOutputsParams``,
``vllm/sampling_params.py``); ``response_format`` takes ``text``, ``json_object``
or ``json_schema``. vLLM's backend refuses, with a 400 before any token, a
grammar, regular expression or JSON schema it cannot compile
(``vllm/v1/structured_output/backend_xgrammar.py``, ``validate_xgrammar_grammar``);
the simulator refuses what its own readers cannot read, with vLLM's messages.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from qfarm.ops.sim.grammar import Grammar, GrammarError, parse_grammar

CONSTRAINT_KEYS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema", "structural_tag")


class ConstraintError(ValueError):
    """A structured-output field vLLM answers with a 400 (``param`` names the field)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Constraint:
    """What the answer must be: ``json`` (valid JSON of the claims shape), or text that a
    grammar, a regular expression or a list of choices admits."""

    kind: str  # "json", "grammar", "regex", "choice", "structural_tag"
    grammar: Grammar | None = None
    regex: re.Pattern[str] | None = None
    choices: tuple[str, ...] = ()

    @property
    def is_json(self) -> bool:
        return self.kind == "json"

    def matches(self, text: str) -> bool:
        if self.grammar is not None:
            return self.grammar.matches(text)
        if self.regex is not None:
            return self.regex.fullmatch(text) is not None
        if self.choices:
            return text in self.choices
        return True

    def fallback(self) -> str | None:
        """A conforming text the simulator can always write (None: it has none)."""
        if self.grammar is not None:
            try:
                return self.grammar.shortest()
            except GrammarError:
                return None
        if self.choices:
            return self.choices[0]
        if self.regex is not None and self.regex.fullmatch(""):
            return ""
        return None


def _check_schema(schema: Any, where: str = "schema") -> None:
    """The shape errors vLLM's JSON-schema compiler stops on: not an object, an unknown
    ``type``, a nested schema that is not one."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ValueError(f"{where} is not a JSON object")
    types = schema.get("type")
    for t in types if isinstance(types, list) else ([types] if types is not None else []):
        if t not in JSON_TYPES:
            raise ValueError(f"{where}: unknown type {t!r}")
    for key in ("properties", "$defs", "definitions"):
        for name, sub in (schema.get(key) or {}).items():
            _check_schema(sub, f"{where}.{key}.{name}")
    for key in ("items", "additionalProperties", "not"):
        if key in schema and not isinstance(schema[key], bool):
            _check_schema(schema[key], f"{where}.{key}")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key) or []):
            _check_schema(sub, f"{where}.{key}[{i}]")


def _json_schema(value: Any, param: str) -> Constraint:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConstraintError("Invalid JSON grammar specification.", param) from exc
    try:
        _check_schema(value)
    except ValueError as exc:
        raise ConstraintError(f"Failed to transform json schema into a grammar: {exc}",
                              param) from exc  # fmt: skip
    return Constraint("json")


def _from_structured_outputs(so: Any) -> Constraint:
    param = "structured_outputs"
    if not isinstance(so, dict):
        raise ConstraintError("structured_outputs must be an object", param)
    given = {k: so[k] for k in CONSTRAINT_KEYS if so.get(k) is not None}
    if len(given) > 1:
        raise ConstraintError(
            "You can only use one kind of structured outputs constraint but multiple are "
            f"specified: {given}", param)  # fmt: skip
    if not given:
        raise ConstraintError(
            "You must use one kind of structured outputs constraint but none are "
            f"specified: {so}", param)  # fmt: skip
    (kind, value), = given.items()
    if kind == "json":
        return _json_schema(value, param)
    if kind == "json_object":
        return Constraint("json")
    if kind == "regex":
        if not isinstance(value, str) or "\x00" in value:
            raise ConstraintError("Failed to transform regex into a grammar: not a pattern", param)
        try:
            return Constraint("regex", regex=re.compile(value))
        except re.error as exc:
            raise ConstraintError(f"Failed to transform regex into a grammar: {exc}",
                                  param) from exc  # fmt: skip
    if kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
            raise ConstraintError("Failed to transform choices into a grammar: "
                                  "choice must be a non-empty list of strings", param)
        return Constraint("choice", choices=tuple(value))
    if kind == "grammar":
        try:
            return Constraint("grammar", grammar=parse_grammar(value))
        except (GrammarError, TypeError) as exc:
            raise ConstraintError("Invalid grammar specification.", param) from exc
    return Constraint("structural_tag")  # accepted; the simulator does not enforce tags


def parse_constraint(body: dict[str, Any]) -> Constraint | None:
    """The request's output constraint (None: free text); ``ConstraintError`` for a field
    vLLM refuses. ``structured_outputs`` wins when both fields are given."""
    so = body.get("structured_outputs")
    if so is not None:
        return _from_structured_outputs(so)
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in RESPONSE_FORMAT_TYPES:
        raise ConstraintError(
            f"response_format.type must be one of {list(RESPONSE_FORMAT_TYPES)} (got {kind!r})",
            "response_format")  # fmt: skip
    if kind == "json_object":
        return Constraint("json")
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict):
            raise ConstraintError("response_format.json_schema must be an object",
                                  "response_format")
        return _json_schema(spec.get("schema", {}), "response_format")
    if kind == "structural_tag":
        return Constraint("structural_tag")
    return None


def grammar_constraint(grammar: str | None) -> Constraint | None:
    """The constraint of a farm request's grammar (None: none), for callers that hold the
    grammar rather than a request body."""
    return None if grammar is None else Constraint("grammar", grammar=parse_grammar(grammar))
