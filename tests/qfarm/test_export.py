"""`qfarm export` and `qfarm sweep --export mlflow`, each a fresh process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_exit_codes import qfarm

pytestmark = pytest.mark.slow


def test_a_sweep_exports_to_mlflow_and_export_writes_parquet(env, tmp_path, export_extra) -> None:
    export_extra("mlflow")
    export_extra("pyarrow")
    (tmp_path / "q.txt").write_text("What is jazz?\nWho wrote Hamlet?\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = qfarm(env, "sweep", str(tmp_path / "q.txt"), "--eager", "--modes", "quote",
                "--quiet", "--json", "--export", "mlflow", "--tracking-uri", uri,
                "--experiment", "ci")
    assert out.returncode == 0, out.stderr
    run_dir = json.loads(out.stdout.splitlines()[-1])["run_dir"]
    [mlflow] = json.loads((Path(run_dir) / "exports.json").read_text())["exports"]
    assert mlflow["kind"] == "mlflow" and mlflow["experiment"] == "ci"
    exported = qfarm(env, "export", run_dir, "--parquet", str(tmp_path / "pq"), "--json")
    assert exported.returncode == 0, exported.stderr
    entry = json.loads(exported.stdout.splitlines()[-1])
    assert entry["files"] == {"rows.parquet": 2}
    assert (tmp_path / "pq" / "rows.parquet").exists()


def test_export_without_a_target_is_one_line_and_exit_2(env, tmp_path) -> None:
    out = qfarm(env, "export", str(tmp_path))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "qfarm: error: qfarm export: say where to: --parquet DIR, --mlflow and/or --otlp"]


def test_a_failed_export_does_not_fail_the_sweep(env, tmp_path, export_extra) -> None:
    export_extra("mlflow")
    (tmp_path / "q.txt").write_text("What is jazz?\n")
    (tmp_path / "file").write_text("")
    out = qfarm(env, "sweep", str(tmp_path / "q.txt"), "--eager", "--modes", "quote", "--quiet",
                "--export", "mlflow", "--tracking-uri", f"sqlite:///{tmp_path / 'file' / 'x.db'}")
    assert out.returncode == 0, out.stderr
    assert "export to mlflow" in out.stderr and "the run is unaffected" in out.stderr


@pytest.fixture
def collector():
    """An OTLP/HTTP collector on loopback that accepts every batch of spans and keeps them."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[tuple[str, str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()


def test_qfarm_otel_sends_a_sweeps_traces_to_the_collector(env, tmp_path, collector,
                                                         export_extra) -> None:
    export_extra("opentelemetry.exporter.otlp.proto.http")
    url, received = collector
    (tmp_path / "q.txt").write_text("What is jazz?\nWho wrote Hamlet?\n")
    out = qfarm({**env, "QFARM_OTEL": "1"}, "sweep", str(tmp_path / "q.txt"), "--eager",
                "--modes", "quote", "--quiet", "--json", "--otlp-endpoint", url)
    assert out.returncode == 0, out.stderr
    run_dir = Path(json.loads(out.stdout.splitlines()[-1])["run_dir"])
    [entry] = json.loads((run_dir / "exports.json").read_text())["exports"]
    assert entry["kind"] == "otlp" and entry["jobs_traced"] == 2
    assert [(path, ctype) for path, ctype, _ in received] == [("/v1/traces", "application/x-protobuf")]
    assert run_dir.name.encode() in received[0][2]  # the spans carry the run id
