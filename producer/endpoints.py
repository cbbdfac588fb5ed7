"""Checking LLM endpoints before a run is created."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from common.errors import ConfigError
from common.vocab import SIMULATOR_HEADER


@dataclass(frozen=True)
class ProbeResult:
    alive: list[str]
    simulated: bool  # the first live endpoint is the qfarm vLLM simulator


def probe_endpoints(
    endpoints: list[str], *, api_keys: Mapping[str, str | None] | None = None,
    timeout_s: float = 5.0,
) -> ProbeResult:
    """The endpoints that answer /v1/models (and whether they are the simulator); raise if none.

    ``api_keys`` maps an endpoint to the key the gateway will send it (per-endpoint keys
    differ when the endpoints sit behind different proxies).
    """
    alive: list[str] = []
    simulated: bool | None = None
    problems: list[str] = []
    with httpx.Client(timeout=timeout_s) as client:
        for url in endpoints:
            key = (api_keys or {}).get(url)
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            try:
                resp = client.get(f"{url}/v1/models", headers=headers)
            except httpx.HTTPError as exc:
                problems.append(f"{url} unreachable ({type(exc).__name__})")
                continue
            if resp.status_code in (401, 403):
                # Every job would fail with the same refusal: a configuration error, said now.
                raise ConfigError(
                    f"{url} refused the API key ({resp.status_code}): set its key in "
                    "QFARM_LLM_API_KEYS (URL=KEY,...) or QFARM_LLM_API_KEY"
                )
            if resp.status_code >= 500:
                problems.append(f"{url} answered {resp.status_code}")
                continue
            alive.append(url)
            if simulated is None:
                simulated = SIMULATOR_HEADER in resp.headers
    if not alive:
        raise ConfigError(
            "no LLM endpoint is reachable: " + "; ".join(problems)
            + ". Check QFARM_LLM_ENDPOINTS (comma-separated base URLs such as http://gpu1:8000), "
            "or unset it to use the built-in vLLM simulator"
        )
    return ProbeResult(alive=alive, simulated=bool(simulated))
