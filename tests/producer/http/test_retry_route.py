"""POST /v1/runs/{id}/retry-errors: a run's error rows run again, in the same run."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from qfarm.producer.http.app import create_app

from .conftest import ADMIN_TOKEN, ASK_TOKEN, TOKENS, bearer

QUESTIONS = ["What is jazz?", "Who wrote Hamlet?", "What is DNA?"]


def test_the_error_rows_of_a_run_are_retried_and_replaced(make_settings):
    settings = make_settings(api_tokens=TOKENS)
    with TestClient(create_app(settings, eager=True)) as client:
        admin = bearer(ADMIN_TOKEN)
        resp = client.post("/v1/sweeps", json={"questions": QUESTIONS, "modes": ["quote"]},
                           headers=admin)
        run_id = resp.json()["run_id"]
        rows_path = settings.results_dir / run_id / "rows.jsonl"
        rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
        # Make the second row what an endpoint outage leaves: an error row.
        failed = {**rows[1], "verdict": None, "label": None, "error": "llm: endpoint down",
                  "error_kind": "llm"}
        kept = [rows[0], rows[2]]
        lines = [json.dumps(r) for r in (rows[0], failed, rows[2])]
        rows_path.write_text("\n".join(lines) + "\n")
        assert client.post(f"/v1/runs/{run_id}/retry-errors",
                           headers=bearer(ASK_TOKEN)).status_code == 403
        resp = client.post(f"/v1/runs/{run_id}/retry-errors", headers=admin)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["state"] == "complete" and body["retry"]["replaced"] == 1
        after = [json.loads(line) for line in rows_path.read_text().splitlines()]
        assert [r["job_id"] for r in after] == [r["job_id"] for r in rows]
        assert after[1]["error"] is None and after[1]["verdict"]
        assert after[1]["retried_errors"] == ["llm"]
        assert [after[0], after[2]] == kept
        assert client.post("/v1/runs/nope/retry-errors", headers=admin).status_code == 404
