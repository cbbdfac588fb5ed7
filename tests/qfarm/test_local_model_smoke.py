"""The real-model smoke: the documented command, five questions in three modes on llama.cpp's
server and the local CPU model (docs/llm.md, 'A real model on this machine'), end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from qfarm.cli import main

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")
SMOKE = "bench/questions/local_smoke.txt"


@pytest.mark.parametrize("command", [["sweep", SMOKE], ["ask", "Who painted the Mona Lisa?"]])
def test_local_model_without_eager_is_refused_before_anything_starts(command, capsys) -> None:
    assert main([*command, "--local-model"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--local-model" in err and "qfarm local-model" in err


@pytest.mark.slow
def test_a_real_model_sweep_names_the_model_and_server_and_is_not_simulated(
    env, local_install
) -> None:
    res = subprocess.run(
        [QFARM, "sweep", SMOKE, "--modes", "quote,claim_lattice_pointer,claim_lattice", "-n", "1",
         "--eager", "--local-model", "--keep-answers", "--quiet"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "SIMULATED" not in res.stderr and "simulator" not in res.stderr
    paths = dict(line.split(":", 1) for line in res.stdout.strip().splitlines())
    rows_path = Path(paths["rows"].split("(")[0].strip())
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    manifest = json.loads((rows_path.parent / "manifest.json").read_text())
    summary = Path(paths["summary"].strip()).read_text()

    assert len(rows) == manifest["n_jobs"] == 15
    assert [r["error"] for r in rows if r["error"]] == []
    model = manifest["model"]
    assert model.startswith("SmolLM2-135M-Instruct") and manifest["simulated"] is False
    assert manifest["model_profile_id"] == "small-local"
    assert manifest["llm_server"].startswith("llama.cpp server (llama-cpp-python ")
    assert manifest["llm_server"].endswith("CPU, local")
    assert manifest["policy"]["top_k"] == 3 and manifest["policy"]["max_tokens"] == 160
    assert {(r["model"], r["simulated"]) for r in rows} == {(model, False)}
    assert {r["llm_server"] for r in rows} == {manifest["llm_server"].removesuffix(", CPU, local")}
    assert all(r["answer"] and r["finish_reason"] in ("stop", "length") for r in rows)
    assert "SIMULATED" not in summary and "simulator" not in summary
    assert f"`{model}` (profile `small-local`)" in summary
    assert "| LLM | llama.cpp server (llama-cpp-python " in summary and "CPU, local |" in summary


@pytest.mark.slow
def test_local_model_serves_in_the_foreground_until_ctrl_c(env, local_install) -> None:
    import signal

    import httpx

    proc = subprocess.Popen([QFARM, "local-model", "--port", "0"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("Ctrl-C"):
                break
        exports = dict(x.removeprefix("export ").split("=", 1) for x in lines if x.startswith("export "))
        url = exports["QFARM_LLM_ENDPOINTS"]
        served = [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"]]
        assert served == [exports["QFARM_MODEL"]]
        assert exports["QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT"] == "1"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        with pytest.raises(httpx.ConnectError):  # the server went with it
            httpx.get(f"{url}/v1/models", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
