"""The official ``openai`` SDK against the simulator: an independent client, not ours."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from qfarm.common.models import Mode
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator

sys.path.insert(0, str(Path(__file__).parent))
from test_sim_behaviour import make_prompt  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"
KEY = "sk-sim-sdk-0123"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(latency="zero", profile="clean", api_key=KEY) as handle:
        yield handle


@pytest.fixture
def client(sim: SimulatorHandle) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{sim.url}/v1", api_key=KEY, max_retries=0) as c:
        yield c


def test_the_openai_sdk_drives_the_simulator(sim: SimulatorHandle, client: openai.OpenAI) -> None:
    prompt = make_prompt(Mode.QUOTE)
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        max_completion_tokens=200,
        seed=1,
    )
    assert chat.choices[0].message.role == "assistant"
    assert "[E1]" in (chat.choices[0].message.content or "")

    batch = client.completions.create(
        model=MODEL, prompt=[prompt, "second prompt"], max_tokens=50, temperature=0.0
    )
    assert sorted(c.index for c in batch.choices) == [0, 1]
    assert batch.usage is not None and batch.usage.prompt_tokens > 0

    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        stream=True,
        stream_options={"include_usage": True},
        seed=1,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="hi", max_tokens=0)
    assert info.value.status_code == 400 and "max_tokens" in str(info.value)

    sim.set_faults(next=["queue_full"])
    with pytest.raises(openai.InternalServerError) as busy:  # the SDK's class for 5xx
        client.completions.create(model=MODEL, prompt="hi")
    assert busy.value.status_code == 503 and "cannot accept new requests" in str(busy.value)
