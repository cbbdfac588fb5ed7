"""Bearer tokens with two scopes, compared in constant time.

``QFARM_API_TOKENS`` holds entries ``TOKEN`` (admin) or ``SCOPE:TOKEN``; ``ask`` may
ask questions and read, ``admin`` may also start, cancel and resume sweeps. With no
tokens configured the API is open, which ``qfarm serve`` allows on a loopback address
only (``check_bind``).

The viewer's HTML pages take the same tokens: a browser cannot send a bearer header
on a link, so ``/?token=T`` sets an HttpOnly, SameSite=Strict cookie and redirects
to the same page without the token in its address (it would otherwise stay in the
history and in Referer headers).
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlencode

from qfarm.common.errors import ConfigError
from qfarm.common.settings import Settings, api_tokens_by_scope

COOKIE = "qfarm_token"
ADMIN, ASK = "admin", "ask"


@dataclass(frozen=True)
class Tokens:
    """The configured tokens (as bytes, for compare_digest) and their scopes."""

    entries: tuple[tuple[bytes, str], ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> Tokens:
        raw = settings.api_tokens.get_secret_value() if settings.api_tokens else None
        return cls(tuple((t.encode(), s) for t, s in api_tokens_by_scope(raw).items()))

    @property
    def required(self) -> bool:
        return bool(self.entries)

    def scope_of(self, presented: str | None) -> str | None:
        """The scope of a presented token, None if it matches none. Every configured token
        is compared (no early exit), so timing says nothing about which one nearly matched."""
        if not presented:
            return None
        given = presented.encode()
        found = None
        for token, scope in self.entries:
            if hmac.compare_digest(token, given):
                found = scope
        return found


def allows(scope: str | None, needed: str) -> bool:
    return scope == ADMIN or (scope == ASK and needed == ASK)


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, else None."""
    if not header:
        return None
    kind, _, value = header.partition(" ")
    return value.strip() or None if kind.lower() == "bearer" else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: Tokens) -> None:
    """Refuse a non-loopback address when no token is configured."""
    if not tokens.required and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} with no QFARM_API_TOKENS: anyone who can reach "
            "that address could submit sweeps and read every run; set QFARM_API_TOKENS "
            "(comma-separated, TOKEN or ask:TOKEN / admin:TOKEN) or bind 127.0.0.1"
        )


def local_target(path: str, query: list[tuple[str, str]]) -> str:
    """Where a login redirects: this server's ``path`` and ``query``, never another host.

    ``//evil.example/`` (or ``/\\evil.example/``, which browsers read the same way) is a
    network-path reference: sent back as a Location it would redirect a user who
    followed a link carrying a valid token to another site. Leading slashes and
    backslashes collapse to one slash, so the target is always a path here.
    """
    target = "/" + path.lstrip("/\\")
    return target + (f"?{urlencode(query)}" if query else "")
