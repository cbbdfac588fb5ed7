"""Checking LLM endpoints before a run is created."""

from __future__ import annotations

import httpx

from common.errors import ConfigError


def probe_endpoints(endpoints: list[str], *, api_key: str | None = None, timeout_s: float = 5.0) -> list[str]:
    """Return the endpoints that answer /v1/models; raise if none does."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    alive: list[str] = []
    problems: list[str] = []
    with httpx.Client(timeout=timeout_s, headers=headers) as client:
        for url in endpoints:
            try:
                resp = client.get(f"{url}/v1/models")
                if resp.status_code < 500:
                    alive.append(url)
                else:
                    problems.append(f"{url} answered {resp.status_code}")
            except httpx.HTTPError as exc:
                problems.append(f"{url} unreachable ({type(exc).__name__})")
    if not alive:
        raise ConfigError(
            "no LLM endpoint is reachable: " + "; ".join(problems)
            + ". Check QFARM_LLM_ENDPOINTS (comma-separated base URLs such as http://gpu1:8000), "
            "or unset it to use the built-in vLLM simulator"
        )
    return alive
