"""What the HTTP front door costs: questions through `qfarm serve` vs the run API directly.

Starts its own redis-server (free port), the vLLM simulator, interactive worker(s) and
`qfarm serve`. N client threads ask distinct questions (result cache bypassed, so
every question runs all stages on a worker):

* direct: ``qfarm.producer.api`` ``submit_ask`` + ``wait_for_answer`` through the queue, with
  one shared context (what ``qfarm ask`` does per call, minus its one-off set-up);
* http: ``POST /v1/ask`` with ``wait_s``, one keep-alive connection per client.

The two alternate (direct, http, direct, http) in the same run; prints requests/s,
p50/p99 latency, the API process's CPU per request (utime+stime from
/proc/<pid>/stat) and the ratios http/direct. Simulated LLM: these figures measure
the farm's plumbing, not a model.

    python -m bench.perf.api_load [--clients 16] [--requests 160] [--workers 1] [--ttft-ms 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import redis

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def questions(count: int, salt: str) -> list[str]:
    base = [line.strip() for line in (REPO / "bench/questions/smoke.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    # Distinct texts (a distinct run and job each); the salt keeps phases apart.
    return [f"{base[i % len(base)]} ({salt} {i})" for i in range(count)]


def drive(n_clients: int, items: list[str], ask_one: Callable[[int, str], None]) -> tuple[float, list[float]]:
    """Run ``ask_one`` over ``items`` from ``n_clients`` threads; (wall s, latencies s)."""
    lat: list[float] = []
    lock = threading.Lock()
    nxt = iter(range(len(items)))

    def client(cid: int) -> None:
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            t0 = time.perf_counter()
            ask_one(cid, items[i])
            dt = time.perf_counter() - t0
            with lock:
                lat.append(dt)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, lat


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_http(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"qfarm serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("qfarm serve did not answer in 60 s")


def main() -> None:  # noqa: C901 - a linear script: start, measure, print
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=160, help="questions per phase")
    ap.add_argument("--rounds", type=int, default=2, help="direct/http pairs, alternated")
    ap.add_argument("--workers", type=int, default=1, help="interactive worker processes")
    ap.add_argument("--threads", type=int, default=16, help="threads per worker (-c)")
    ap.add_argument("--ttft-ms", type=float, default=20.0, help="simulator time to first token")
    args = ap.parse_args()

    from qfarm.ops.sim.launch import start_simulator

    work = Path(tempfile.mkdtemp(prefix="qfarm-api-load-"))
    rport = free_port()
    procs: list[subprocess.Popen] = []
    procs.append(subprocess.Popen(
        ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(work)], stdout=subprocess.DEVNULL))
    redis_url = f"redis://127.0.0.1:{rport}/0"
    sim = start_simulator(ttft_ms=args.ttft_ms, tpot_ms=0, max_num_seqs=256)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_") or k == "QFARM_DATA_DIR"}
    env.update(QFARM_REDIS_URL=redis_url, QFARM_LLM_ENDPOINTS=sim.url,
               QFARM_RESULTS_DIR=str(work / "results"), PYTHONUNBUFFERED="1")
    try:
        client = redis.Redis.from_url(redis_url)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        from qfarm.common.settings import load_settings
        from qfarm.producer.api import open_local_retriever

        os.environ.update(env)
        settings = load_settings()
        open_local_retriever(settings, progress=True)  # build the default index before timing
        for w in range(args.workers):
            procs.append(subprocess.Popen(
                [str(BIN / "celery"), "-A", "qfarm.worker", "worker", "-Q", "interactive", "-P",
                 "threads", "-c", str(args.threads), "-n", f"inter{w}@%h", "--without-gossip",
                 "--without-mingle"], cwd=REPO, env=env, stdout=(work / f"w{w}.log").open("wb"),
                stderr=subprocess.STDOUT, start_new_session=True))
        aport = free_port()
        api_log = work / "api.log"
        api = subprocess.Popen([str(BIN / "qfarm"), "serve", "--port", str(aport)], cwd=REPO,
                               env=env, stdout=api_log.open("wb"), stderr=subprocess.STDOUT,
                               start_new_session=True)
        procs.append(api)
        base = f"http://127.0.0.1:{aport}"
        wait_http(base, api, api_log)
        # Workers are ready once their heartbeats are in (worker/metrics.py).
        from qfarm.producer.store import ProducerStore

        store = ProducerStore(client)
        deadline = time.monotonic() + 90
        while len({w.node for w in store.live_workers()}) < args.workers:
            if time.monotonic() > deadline:
                raise SystemExit("workers did not start; see " + str(work))
            time.sleep(0.3)

        from qfarm.common.policy import Policy
        from qfarm.producer.api import ask_context, submit_ask, wait_for_answer

        ctx = ask_context(settings)

        def direct(_cid: int, q: str) -> None:
            ticket = submit_ask(ctx, q, "quote", Policy(), use_cache=False)
            if wait_for_answer(ctx.store, ticket, 120) is None:
                raise SystemExit(f"no answer for {q!r}")

        clients = [httpx.Client(base_url=base, timeout=120) for _ in range(args.clients)]

        def http(cid: int, q: str) -> None:
            resp = clients[cid].post("/v1/ask", json={"question": q, "mode": "quote",
                                                      "burn": True, "wait_s": 120})
            if resp.status_code != 200:
                raise SystemExit(f"HTTP {resp.status_code}: {resp.text[:300]}")

        # Warm-up: connections, the server's ask context, the workers' first imports.
        drive(args.clients, questions(args.clients * 2, "warm-d"), direct)
        drive(args.clients, questions(args.clients * 2, "warm-h"), http)

        results: dict[str, list[tuple[float, list[float], float]]] = {"direct": [], "http": []}
        client_cpu = {"direct": 0.0, "http": 0.0}  # this process: the callers' side
        for r in range(args.rounds):
            for name, fn in (("direct", direct), ("http", http)):
                cpu0, own0 = cpu_s(api.pid), cpu_s(os.getpid())
                wall, lat = drive(args.clients, questions(args.requests, f"{name}-{r}"), fn)
                results[name].append((wall, lat, cpu_s(api.pid) - cpu0))
                client_cpu[name] += cpu_s(os.getpid()) - own0
        for c in clients:
            c.close()

        print(f"api_load: {args.clients} clients, {args.requests} questions per phase x "
              f"{args.rounds} rounds, {args.workers} interactive worker(s) x {args.threads} "
              f"threads, simulator ttft={args.ttft_ms:g} ms (SIMULATED LLM)")
        summary = {}
        for name, runs in results.items():
            lat = [x for _, ls, _ in runs for x in ls]
            n = len(lat)
            rps = statistics.median(args.requests / wall for wall, _, _ in runs)
            cpu_ms = 1000 * sum(c for _, _, c in runs) / n
            caller_ms = 1000 * client_cpu[name] / n
            summary[name] = (rps, pct(lat, 0.5), pct(lat, 0.99), cpu_ms)
            print(f"{name:6s}  {rps:7.1f} req/s   p50 {1000 * pct(lat, 0.5):7.1f} ms   "
                  f"p99 {1000 * pct(lat, 0.99):7.1f} ms   CPU per request: API process "
                  f"{cpu_ms:5.2f} ms, callers {caller_ms:5.2f} ms, sum {cpu_ms + caller_ms:5.2f} ms")
        d, h = summary["direct"], summary["http"]
        print(f"http/direct: throughput x{h[0] / d[0]:.2f}, p50 x{h[1] / d[1]:.2f}, "
              f"p99 x{h[2] / d[2]:.2f}")
        print(f"api_cpu_ms_per_request={h[3]:.2f}")
        print(f"api_http_p50_ratio={h[1] / d[1]:.2f}")
    finally:
        sim.stop()
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
