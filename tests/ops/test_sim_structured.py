"""The simulator under structured output, over HTTP: vLLM's 400s for fields it cannot
compile, and answers that match the grammar the farm sends, whatever the failure rates."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from qfarm.common.grounding.grammars import answer_grammar
from qfarm.common.models import Mode
from qfarm.ops.sim.grammar import parse_grammar
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from test_sim_behaviour import make_evidence, make_prompt  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(latency="zero", profile="noisy", max_model_len=4096) as handle:
        yield handle


def post(sim: SimulatorHandle, **fields: object) -> httpx.Response:
    body = {"model": MODEL, "prompt": make_prompt(Mode.QUOTE), "max_tokens": 400, **fields}
    return httpx.post(f"{sim.url}/v1/completions", json=body, timeout=10.0)


@pytest.mark.parametrize("mode", list(Mode))
def test_every_answer_matches_the_grammar(sim: SimulatorHandle, mode: Mode) -> None:
    """The noisy profile collapses, writes prose and breaks JSON a quarter of the time
    without a grammar; under one, every answer conforms and only wrong pointers remain."""
    ids = [e.id for e in make_evidence()]
    grammar = answer_grammar(mode, ids, max_claims=2, max_ids_per_claim=2)
    assert grammar is not None
    reader = parse_grammar(grammar)
    seen: Counter[bool] = Counter()
    for seed in range(25):
        resp = post(sim, prompt=make_prompt(mode), seed=seed, temperature=0.7,
                    structured_outputs={"grammar": grammar})
        assert resp.status_code == 200, resp.text
        choice = resp.json()["choices"][0]
        assert choice["finish_reason"] == "stop"
        seen[reader.matches(choice["text"])] += 1
    assert seen == Counter({True: 25})
    free = [post(sim, prompt=make_prompt(mode), seed=s, temperature=0.7).json()["choices"][0]
            for s in range(25)]
    assert not all(reader.matches(c["text"]) for c in free)  # the grammar made the difference


def test_regex_and_choice_are_honoured(sim: SimulatorHandle) -> None:
    text = post(sim, structured_outputs={"choice": ["yes", "no"]}).json()["choices"][0]["text"]
    assert text in ("yes", "no")
    regex = r'("[^"\n]+" \[E[0-9]+\]\n?)+'
    text = post(sim, structured_outputs={"regex": regex}, seed=3).json()["choices"][0]["text"]
    assert __import__("re").fullmatch(regex, text)


@pytest.mark.parametrize(("fields", "message"), [
    ({"structured_outputs": {"grammar": 'root ::= "a"', "regex": "a"}},
     "You can only use one kind of structured outputs constraint"),
    ({"structured_outputs": {}}, "You must use one kind of structured outputs constraint"),
    ({"structured_outputs": {"grammar": 'root ::= "unterminated'}}, "Invalid grammar specification."),
    ({"structured_outputs": {"grammar": "root ::= missing-rule"}}, "Invalid grammar specification."),
    ({"structured_outputs": {"regex": "(unclosed"}}, "Failed to transform regex into a grammar"),
    ({"structured_outputs": {"json": "{not json"}}, "Invalid JSON grammar specification."),
    ({"structured_outputs": {"json": {"type": "objekt"}}},
     "Failed to transform json schema into a grammar"),
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "x", "schema": {"type": "strng"}}}},
     "Failed to transform json schema into a grammar"),
    ({"response_format": {"type": "yaml"}}, "response_format.type must be one of"),
])  # fmt: skip
def test_a_constraint_vllm_cannot_compile_is_a_400(
    sim: SimulatorHandle, fields: dict, message: str
) -> None:
    resp = post(sim, **fields)
    assert resp.status_code == 400
    assert message in resp.json()["error"]["message"]
