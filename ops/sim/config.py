"""The simulator's options: one dataclass, one argparse definition, one argv rendering.

``python -m qfarm.ops.sim``, ``qfarm sim`` and ``launch.start_simulator(**options)``
all go through here, so an option means the same thing everywhere.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from qfarm.common.settings import DEFAULT_MODEL
from qfarm.ops.sim.behaviour import DEFAULT_PROFILE, FAILURE_KINDS, PROFILES, BehaviourRates
from qfarm.ops.sim.cost import CostModel
from qfarm.ops.sim.faults import FAULT_KINDS, check_rates
from qfarm.ops.sim.latency import DEFAULT_PRESET, PRESETS, LatencyModel, format_range, parse_range

SCHEDULING_POLICIES = ("fcfs", "priority")  # vLLM's --scheduling-policy choices


@dataclass
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = DEFAULT_MODEL
    served_model_names: tuple[str, ...] = ()  # extra names accepted in "model"
    max_num_seqs: int = 256
    max_model_len: int = 8192
    latency: LatencyModel = field(default_factory=LatencyModel)
    profile: str = DEFAULT_PROFILE
    rates: BehaviourRates = field(default_factory=lambda: PROFILES[DEFAULT_PROFILE])
    fault_rates: dict[str, float] = field(default_factory=dict)
    retry_after_s: float = 1.0
    hang_s: float = 3600.0
    shuffle_choices: bool = False
    api_key: str | None = None
    stream_interval: int = 8  # tokens per streamed chunk after the first
    seed: int | None = None  # latency and fault draws; answers depend only on (prompt, seed)
    port_file: str | None = None  # written once the port is bound (for port 0)
    log_requests: bool = False
    disable_log_stats: bool = False  # like vllm --disable-log-stats: no vllm:* series in /metrics
    omit_usage: bool = False  # replies without "usage", as some OpenAI-compatible servers send
    # vLLM's --scheduling-policy: "priority" serves waiting sequences by (priority, arrival);
    # "fcfs" by arrival, and refuses a request priority other than 0.
    scheduling_policy: str = "fcfs"
    cost: CostModel | None = None  # --latency cost: the cost engine replaces ``latency``

    def accepted_models(self) -> set[str]:
        return {self.model, *self.served_model_names}


def _key_values(items: list[str], what: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{what} {item!r}: expected NAME=RATE, e.g. 429=0.05")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{what} {item!r}: {value!r} is not a number"
            ) from None
    return out


def add_sim_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one (default 8000)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name served (default %(default)s)")
    p.add_argument(
        "--served-model-name",
        action="append",
        default=[],
        metavar="NAME",
        help="another name accepted as the request's model (repeatable)",
    )
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        help="sequences generated at once; excess requests queue (default 256)",
    )
    p.add_argument(
        "--scheduling-policy",
        choices=SCHEDULING_POLICIES,
        default="fcfs",
        help="as vLLM's: 'priority' serves waiting requests by their 'priority' (lower first), "
        "then arrival; 'fcfs' by arrival, and a 'priority' other than 0 is a 400 (default fcfs)",
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=8192,
        help="prompt + max_tokens limit; longer requests get a 400 (default 8192)",
    )
    p.add_argument(
        "--latency",
        choices=sorted([*PRESETS, COST_LATENCY]),
        default=DEFAULT_PRESET,
        help="latency preset: h100-8b (TTFT 60-120 ms, 10-15 ms/token), zero, or cost "
        "(prefill per uncached prompt token, batched decode, a prefix cache)",
    )
    add_cost_arguments(p)
    p.add_argument("--ttft-ms", default=None, help="time to first token, ms or LOW-HIGH range")
    p.add_argument("--tpot-ms", default=None, help="time per output token, ms or LOW-HIGH range")
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=DEFAULT_PROFILE,
        help="answer failure rates (default %(default)s; 'clean' never fails)",
    )
    p.add_argument(
        "--rate",
        action="append",
        default=[],
        metavar="KIND=P",
        help=f"override one failure rate; kinds: {', '.join(FAILURE_KINDS)}",
    )
    p.add_argument(
        "--fault-rate",
        action="append",
        default=[],
        metavar="KIND=P",
        help=f"inject HTTP faults at rate P; kinds: {', '.join(FAULT_KINDS)}",
    )
    p.add_argument(
        "--retry-after-s",
        type=float,
        default=1.0,
        help="Retry-After sent with injected 429s (default 1)",
    )
    p.add_argument(
        "--hang-s",
        type=float,
        default=3600.0,
        help="how long an injected timeout holds the request (default 3600)",
    )
    p.add_argument(
        "--shuffle-choices",
        action="store_true",
        help="return choices out of index order (clients must map by index)",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on /v1 routes, like vllm --api-key "
        "(or set QFARM_SIM_API_KEY, which keeps the key out of process listings)",
    )
    p.add_argument(
        "--stream-interval",
        type=int,
        default=8,
        help="tokens per streamed chunk after the first (default 8)",
    )
    p.add_argument("--seed", type=int, default=None, help="seed for latency and fault draws")
    p.add_argument("--port-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("--log-requests", action="store_true", help="print one line per request")
    p.add_argument(
        "--disable-log-stats",
        action="store_true",
        help="serve /metrics without vLLM's series, as vllm --disable-log-stats does",
    )
    p.add_argument(
        "--omit-usage",
        action="store_true",
        help="reply without token usage, as some OpenAI-compatible servers do (qfarm then "
        "estimates tokens and says so)",
    )


COST_LATENCY = "cost"
# --latency cost's options: (CostModel field, which is the flag's name, type, help).
COST_OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("prefill_ms_per_token", float, "prefill time per uncached prompt token, ms (default 0.04)"),
    ("decode_step_ms", float, "fixed time of one engine step (a forward pass), ms (default 6)"),
    ("decode_ms_per_seq", float, "time each running sequence adds to a step, ms (default 0.06)"),
    ("prefix_cache_blocks", int, "prefix cache capacity in blocks; 0 turns it off (default 25000)"),
    ("block_size", int, "tokens per prefix-cache block (default 16, as vLLM)"),
    ("time_scale", float, "multiply every sleep (not the seconds charged) by this (default 1)"),
)


def add_cost_arguments(p: argparse.ArgumentParser) -> None:
    for name, kind, text in COST_OPTIONS:
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                       help=f"--latency cost: {text}")  # fmt: skip


def cost_from_args(args: argparse.Namespace) -> CostModel | None:
    """The cost model ``--latency cost`` asks for, or None; its options need it."""
    given = {n: getattr(args, n) for n, _, _ in COST_OPTIONS if getattr(args, n, None) is not None}
    if args.latency != COST_LATENCY:
        if given:
            flags = ", ".join("--" + n.replace("_", "-") for n in given)
            raise ValueError(f"{flags}: only with --latency cost (the latency is {args.latency})")
        return None
    if args.ttft_ms is not None or args.tpot_ms is not None:
        raise ValueError("--ttft-ms/--tpot-ms: not with --latency cost, which charges per token "
                         "(set --prefill-ms-per-token, --decode-step-ms, --decode-ms-per-seq)")
    try:
        return CostModel(**given)
    except ValueError as exc:
        raise ValueError(f"--latency cost: {exc}") from None


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Build and validate a SimConfig; raises ValueError with the option's name."""
    cost = cost_from_args(args)
    latency = LatencyModel.preset(DEFAULT_PRESET if cost else args.latency)
    try:
        if args.ttft_ms is not None:
            latency = LatencyModel(parse_range(args.ttft_ms), latency.tpot_ms)
        if args.tpot_ms is not None:
            latency = LatencyModel(latency.ttft_ms, parse_range(args.tpot_ms))
    except ValueError as exc:
        raise ValueError(f"--ttft-ms/--tpot-ms: {exc}") from None
    try:
        rates = PROFILES[args.profile].with_overrides(**_key_values(args.rate, "--rate"))
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise ValueError(f"--rate: {exc}") from None
    try:
        fault_rates = check_rates(_key_values(args.fault_rate, "--fault-rate"))
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise ValueError(f"--fault-rate: {exc}") from None
    if args.max_num_seqs < 1:
        raise ValueError("--max-num-seqs must be at least 1")
    return SimConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        served_model_names=tuple(args.served_model_name),
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        latency=latency,
        profile=args.profile,
        rates=rates,
        fault_rates=fault_rates,
        retry_after_s=args.retry_after_s,
        hang_s=args.hang_s,
        shuffle_choices=args.shuffle_choices,
        api_key=args.api_key or os.environ.get("QFARM_SIM_API_KEY") or None,
        stream_interval=max(1, args.stream_interval),
        seed=args.seed,
        port_file=args.port_file,
        log_requests=args.log_requests,
        disable_log_stats=args.disable_log_stats,
        omit_usage=args.omit_usage,
        scheduling_policy=args.scheduling_policy,
        cost=cost,
    )


OPTION_NAMES = frozenset(
    {
        "model", "served_model_names", "max_num_seqs", "max_model_len", "latency", "ttft_ms",
        "tpot_ms", "profile", "rates", "fault_rates", "retry_after_s", "hang_s",
        "shuffle_choices", "stream_interval", "seed", "log_requests", "disable_log_stats",
        "omit_usage", "scheduling_policy", *(name for name, _, _ in COST_OPTIONS),
    }
)  # fmt: skip


def options_to_argv(**options: Any) -> list[str]:
    """Keyword options of ``start_simulator`` as command-line flags (``api_key`` excepted:
    the launcher passes it in the environment, out of process listings).

    ``latency`` is a preset name; ``ttft_ms``/``tpot_ms`` take a number or a
    (low, high) pair; ``rates`` and ``fault_rates`` are dicts of kind -> rate.
    """
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"unknown simulator option(s) {unknown}; known: {sorted(OPTION_NAMES)}")
    argv: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if name == "served_model_names":
            for v in value:
                argv += ["--served-model-name", v]
        elif name in ("ttft_ms", "tpot_ms") and isinstance(value, str):
            argv += [flag, value]
        elif name in ("ttft_ms", "tpot_ms"):
            pair = tuple(value) if isinstance(value, tuple | list) else (float(value), float(value))
            argv += [flag, format_range((float(pair[0]), float(pair[1])))]
        elif name in ("rates", "fault_rates"):
            flag = "--rate" if name == "rates" else "--fault-rate"
            for kind, rate in dict(value).items():
                argv += [flag, f"{kind}={rate}"]
        elif value is True:
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def describe(config: SimConfig) -> str:
    lat = config.latency
    timing = (
        f"ttft_ms={format_range(lat.ttft_ms)} tpot_ms={format_range(lat.tpot_ms)}"
        if config.cost is None
        else "latency=cost " + " ".join(f"{k}={v:g}" for k, v in config.cost.as_dict().items())
    )
    return (
        f"model={config.model} max_num_seqs={config.max_num_seqs} "
        f"scheduling_policy={config.scheduling_policy} {timing} "
        f"profile={config.profile} faults={config.fault_rates or 'none'}"
    )


__all__ = [
    "SimConfig",
    "add_sim_arguments",
    "config_from_args",
    "describe",
    "options_to_argv",
]
