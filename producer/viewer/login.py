"""What a browser sees when the viewer wants a token: a page that says how to log in.

Both servers that mount the viewer (``qfarm view``'s, ``qfarm serve``'s) answer a
request without a valid token with 401; a client that asks for HTML gets this page,
with a form that sends the token once as ``?token=`` (the server turns it into a
cookie and redirects to the page without it), while scripts keep their one-line
answer.
"""

from __future__ import annotations

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
