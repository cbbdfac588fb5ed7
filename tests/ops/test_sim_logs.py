"""The simulator logs like every qfarm process: JSON lines when asked, its key redacted."""

from __future__ import annotations

import json
import signal

import httpx

from qfarm.ops.sim.launch import start_simulator

KEY = "sim-key-0a1b2c3d4e5f"


def test_the_simulator_s_json_log_parses_and_hides_its_key(monkeypatch) -> None:
    monkeypatch.setenv("QFARM_LOG_FORMAT", "json")
    monkeypatch.setenv("QFARM_LOG_LEVEL", "debug")
    with start_simulator(latency="zero", api_key=KEY, log_requests=True) as sim:
        got = httpx.get(f"{sim.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert got.status_code == 200
        sim.proc.send_signal(signal.SIGTERM)  # as stop() does, but keep its log to read
        sim.proc.wait(timeout=10)
        text = sim.log_path.read_text()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert {r["role"] for r in records} == {"simulator"}
    messages = [r["message"] for r in records]
    assert any("SIMULATOR" in m and "simulated" in m for m in messages)
    assert any(m.startswith("[simulated] /v1/models 200") for m in messages)
    assert messages[-1] == "qfarm vLLM SIMULATOR stopped"
    assert KEY not in text
