"""Who may see the viewer's pages, and what a browser sees when it wants a token.

Both servers that mount the viewer (``qfarm view``'s, ``qfarm serve``'s) ask ``gate``
before every page, so the rule is written once: with tokens configured, a request
without a valid one gets 401; a client that asks for HTML gets a page saying how to
log in, with a form that sends the token once as ``?token=`` (turned into a cookie
and a redirect to the page without it), while scripts get a line.
"""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie

from qfarm.producer.http import auth
from qfarm.producer.viewer.html import Response, h, page

MISSING = ("This viewer's pages need a token: one of the tokens in "
           "<code>QFARM_API_TOKENS</code> on the host that runs it (<code>qfarm view</code> or "
           "<code>qfarm serve</code>; ask whoever runs it for one). Enter it once: this browser "
           "keeps it in a cookie for this site (HttpOnly, SameSite=Strict) and the page opens "
           "without the token in its address.")
INVALID = "That token is not one this viewer knows; check it and enter it again."


def wants_html(accept: str | None) -> bool:
    """A browser's request (its Accept header names HTML), not a script's."""
    return "text/html" in (accept or "").lower()


def login_page(path: str, query: list[tuple[str, str]], *, invalid: bool = False) -> Response:
    """401 with how to log in and a form back to ``path`` (on this server) and its ``query``."""
    kept = "".join(f'<input type="hidden" name="{h(k)}" value="{h(v)}">'
                   for k, v in query if k != "token")
    body = (
        f"<h1>Log in</h1>{'<p class=err id=invalid>' + INVALID + '</p>' if invalid else ''}"
        f"<p id=how>{MISSING}</p>"
        f'<form class="filters" method="get" action="{h(auth.local_target(path, []))}">{kept}'
        '<label>token <input type="password" name="token" autocomplete="current-password" '
        'required></label><button>log in</button></form>'
        "<p class=note>Scripts send <code>Authorization: Bearer TOKEN</code> instead.</p>"
    )
    return page("log in", body, status=401, standalone=True)


def gate(
    tokens: auth.Tokens, path: str, query: list[tuple[str, str]], *,
    cookie: str | None, authorization: str | None, accept: str | None, secure: bool = False,
) -> Response | None:  # fmt: skip
    """What a request for a viewer page gets instead of the page, None when it may see
    it: no token configured, or a valid one in its cookie or bearer header. ``?token=T``
    logs in: a cookie (``Secure`` when the request came over HTTPS) and a redirect to
    the same page, on this server, without the token in its address."""
    if not tokens.required:
        return None
    token = next((v for k, v in query if k == "token"), None)
    if token is not None:
        if tokens.scope_of(token) is None:
            return refusal(path, query, "that token is not valid", accept, invalid=True)
        flags = "HttpOnly; SameSite=Strict; Path=/" + ("; Secure" if secure else "")
        target = auth.local_target(path, [(k, v) for k, v in query if k != "token"])
        return Response(303, "text/plain; charset=utf-8", b"",
                        headers={"Location": target, "Set-Cookie": f"{auth.COOKIE}={token}; {flags}"})
    if tokens.scope_of(cookie_token(cookie) or auth.bearer(authorization)) is not None:
        return None
    return refusal(path, query, "the viewer needs a token: open /?token=TOKEN once (a cookie "
                   "keeps it) or send Authorization: Bearer TOKEN", accept)


def refusal(path: str, query: list[tuple[str, str]], text: str, accept: str | None, *,
            invalid: bool = False) -> Response:
    """401: a page saying how to log in for a browser, ``text`` (one line) for a script."""
    if wants_html(accept):
        return login_page(path, query, invalid=invalid)
    return Response(401, "text/plain; charset=utf-8", (text + "\n").encode())


def cookie_token(header: str | None) -> str | None:
    """The viewer's token from a Cookie header, None without one (or unreadable)."""
    try:
        jar = SimpleCookie(header or "")
    except CookieError:
        return None
    morsel = jar.get(auth.COOKIE)
    return morsel.value if morsel else None
