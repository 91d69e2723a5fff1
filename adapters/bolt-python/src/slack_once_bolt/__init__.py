"""Bolt for Python behind the slack-once gateway.

The gateway forwards each request from Slack to the app, re-signed, naming the run that handles
it; every Web API call the app makes for that request goes back to the gateway, which makes each
write once. This module is the bot's side of that contract (docs/gateway-protocol.md):

    once = SlackOnce(api_url=os.environ.get("SLACK_ONCE_API_URL"))
    app = App(
        signing_secret=os.environ["SLACK_SIGNING_SECRET"],
        **once.app_options(token=os.environ["SLACK_BOT_TOKEN"]),
    )
    once.install(app)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from slack_bolt import App, BoltContext, BoltRequest, BoltResponse
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.context.respond import Respond
from slack_bolt.context.respond.internals import _build_message
from slack_bolt.middleware import Middleware
from slack_sdk import WebClient
from slack_sdk.webhook import WebhookResponse

__all__ = ["SlackOnce", "SlackOnceRequest", "GatewayRespond", "DEFAULT_API_URL"]

DEFAULT_API_URL = "http://127.0.0.1:3000/api/"
"""Where the Web API proxy of a gateway on the same host answers (`SLACK_ONCE_API_URL`)."""

RUN_HEADER = "X-Slack-Once-Request"
API_URL_HEADER = "X-Slack-Once-Api-Url"
KEY_HEADER = "X-Slack-Once-Key"
ATTEMPT_HEADER = "X-Slack-Once-Attempt"
DEADLINE_HEADER = "X-Slack-Once-Deadline"
TEAM_HEADER = "X-Slack-Once-Team"
BOT_USER_HEADER = "X-Slack-Once-Bot-User"
SIGNATURE_HEADER = "X-Slack-Once-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"

# The protocol's run name: opaque, at most 64 characters of [A-Za-z0-9-].
_RUN_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
_API_URL = re.compile(r"https?://[^\s/]+/(\S*/)?")

# The request this thread handles (or handled last): its client, where `app.client`'s calls go.
_request_client: ContextVar[WebClient | None] = ContextVar("slack_once_request_client", default=None)

# The context keys whose values Bolt binds to the request's client when something reads them
# (a global middleware's arguments read `say` and `respond`): dropped so that they are built
# again from the gateway's client. `respond` is set anew.
_CLIENT_BOUND_UTILITIES = ("say", "complete", "fail")


@dataclass(frozen=True)
class SlackOnceRequest:
    """What the gateway says about the request being handled: `context["slack_once"]`.

    - `run`: this delivery's claim of the request (`X-Slack-Once-Request`); every Web API call
      made for the request carries it back.
    - `key`: the request's identity (`X-Slack-Once-Key`), the same on every delivery, retry and
      takeover: the key for making side effects outside Slack idempotent.
    - `attempt`: 1 on the first run; above 1 when this run takes over from one that did not
      finish (its recorded writes are answered from the journal, not made again).
    - `deadline_ms`: Unix milliseconds at which the run's lease ends; a write after it is refused.
    - `api_url`: the Web API proxy this run's calls go to.
    - `team`, `bot_user`: the workspace the request is for and the bot's user there, when the
      gateway names them: Bolt's authorization takes them from here, with no `auth.test`.
    """

    run: str | None
    key: str | None
    attempt: int | None
    deadline_ms: int | None
    api_url: str
    team: str | None = None
    bot_user: str | None = None


class GatewayRespond(Respond):
    """Bolt's `respond()`, posted to the gateway (`POST {api_url}respond`) under the run, which
    posts it to the request's own `response_url` as a step of the request.

    The URL is never posted to directly: a second run of the request would post again.
    A refusal of the gateway (`{"ok": false, "error": "slack_once_…"}`) raises `SlackApiError`.
    """

    def __init__(self, *, client: WebClient, response_url: str | None):
        super().__init__(response_url=response_url, proxy=client.proxy, ssl=client.ssl)
        self.client = client

    def __call__(
        self,
        text: str | dict = "",
        blocks: Sequence[Any] | None = None,
        attachments: Sequence[Any] | None = None,
        response_type: str | None = None,
        replace_original: bool | None = None,
        delete_original: bool | None = None,
        unfurl_links: bool | None = None,
        unfurl_media: bool | None = None,
        thread_ts: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WebhookResponse:
        if self.response_url is None:
            raise ValueError("respond is unsupported here as there is no response_url")
        if isinstance(text, dict):
            message = _build_message(**text)
        elif isinstance(text, str):
            message = _build_message(
                text=text,
                blocks=blocks,
                attachments=attachments,
                response_type=response_type,
                replace_original=replace_original,
                delete_original=delete_original,
                unfurl_links=unfurl_links,
                unfurl_media=unfurl_media,
                thread_ts=thread_ts,
                metadata=metadata,
            )
        else:
            raise ValueError(f"The arg is unexpected type ({type(text)})")
        # The SDK's own call: the client's headers (the run's), token, retries, redacted debug
        # log, and SlackApiError on an answer that is not ok; without the client's default
        # `team_id`, which it would add to the body.
        poster = _client_like(
            self.client, base_url=self.client.base_url, headers=dict(self.client.headers), team_id=None
        )
        answer = poster.api_call("respond", json=message)
        return WebhookResponse(
            url=answer.api_url,
            status_code=answer.status_code,
            body=json.dumps(answer.data) if isinstance(answer.data, dict) else str(answer.data),
            headers=answer.headers,
        )


class SlackOnce:
    """The gateway's side of a Bolt app: `app_options()` for `App(...)`, then `install(app)`."""

    def __init__(self, api_url: str | None = None):
        api_url = api_url or DEFAULT_API_URL
        if not api_url.endswith("/"):
            api_url += "/"
        if not _API_URL.fullmatch(api_url):
            raise ValueError(f"api_url must be an http(s) URL such as {DEFAULT_API_URL!r}, got {api_url!r}")
        self.api_url = api_url

    def app_options(
        self,
        token: str | None = None,
        *,
        bot_user_id: str | None = None,
        bot_id: str | None = None,
        **client_options: Any,
    ) -> dict[str, Any]:
        """`App(**once.app_options(token=...))`: a client whose calls go to the gateway, and
        `process_before_response=True` (the app answers when its listener has ended, which the
        gateway reads as the end of the run).

        `token` is the gateway's `SLACK_ONCE_PROXY_TOKEN` (a placeholder, never a Slack token),
        by default `SLACK_BOT_TOKEN` as Bolt reads it. Bolt takes the token from the client it is
        given, so it goes here rather than to `App`. `client_options` go to `WebClient`
        (`timeout`, `retry_handlers`, `logger`…).

        `bot_user_id` and `bot_id` (what `auth.test` would say) are the bot's own where the forward
        names no bot user (an event authorized for a person): Bolt ignores the bot's own events by
        them.
        """
        self.token = token or os.environ.get("SLACK_BOT_TOKEN")
        self.bot_user_id, self.bot_id = bot_user_id, bot_id
        return {
            "client": _AppClient(token=self.token, base_url=self.api_url, **client_options),
            "process_before_response": True,
            # The gateway names each request's workspace and bot user: Bolt's single-workspace
            # authorization would ask auth.test outside any request, and take one workspace's
            # answer for every other.
            "before_authorize": _ForwardedIdentity(self),
            # A function of its own: Bolt passes arguments by their names.
            "authorize": lambda context: self._authorize(context),
        }

    def _authorize(self, context: BoltContext) -> AuthorizeResult:
        """Bolt's authorization of a forwarded request: the placeholder token, and the workspace
        and bot user the gateway names."""
        request = context.get("slack_once")
        return AuthorizeResult(
            enterprise_id=context.enterprise_id,
            team_id=(request.team if request else None) or context.team_id,
            bot_token=self.token,
            bot_user_id=(request.bot_user if request else None) or self.bot_user_id,
            bot_id=self.bot_id,
        )

    def install(self, app: App) -> None:
        """Adds the global middleware that gives each request its own client bound to its run.

        Install it before any other middleware, so that everything after it sees the request's
        client. Refuses an app that answers Slack before its listeners end.
        """
        if not app.process_before_response:
            raise ValueError(
                "slack-once needs App(process_before_response=True): the gateway reads the app's "
                "answer as the end of the run (use App(**once.app_options(...)))"
            )
        self.signing_secret = app._signing_secret
        app.use(_RunMiddleware(self))

    def request_of(self, req: BoltRequest) -> SlackOnceRequest:
        """The gateway's headers of a forwarded request (`ValueError` if one is malformed, or if
        the run and the proxy's address are not signed with the app's signing secret)."""
        run = _header(req, RUN_HEADER)
        if run is not None and not _RUN_NAME.fullmatch(run):
            raise ValueError(f"{RUN_HEADER} is not a run name")
        forwarded_api_url = _header(req, API_URL_HEADER)
        api_url = forwarded_api_url or self.api_url
        if not _API_URL.fullmatch(api_url):
            raise ValueError(f"{API_URL_HEADER} is not an http(s) URL ending with /")
        if run is not None and forwarded_api_url is not None and not self._signed(req, run, api_url):
            # A forward replayed with another address must not send the token there.
            raise ValueError(f"{SIGNATURE_HEADER} does not sign {RUN_HEADER} and {API_URL_HEADER}")
        return SlackOnceRequest(
            run=run,
            key=_header(req, KEY_HEADER),
            attempt=_integer_header(req, ATTEMPT_HEADER),
            deadline_ms=_integer_header(req, DEADLINE_HEADER),
            api_url=api_url,
            team=_header(req, TEAM_HEADER),
            bot_user=_header(req, BOT_USER_HEADER),
        )

    def _signed(self, req: BoltRequest, run: str, api_url: str) -> bool:
        """Whether `X-Slack-Once-Signature` is `v0=` and the hex HMAC-SHA256 of
        `v0:{timestamp}:{run}:{api_url}` under the signing secret (the timestamp Bolt verified)."""
        secret = getattr(self, "signing_secret", None)
        given, timestamp = _header(req, SIGNATURE_HEADER), _header(req, TIMESTAMP_HEADER)
        if not secret or given is None or timestamp is None:
            return False
        signed = f"v0:{timestamp}:{run}:{api_url}".encode()
        expected = "v0=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, given)

    def client_for(self, request: SlackOnceRequest, base: WebClient) -> WebClient:
        """A new client for one request: `base`'s settings (the token authorization chose), the
        run's proxy URL, and a headers dict of its own carrying the run.

        Bolt gives every request's client the app client's headers dict itself, so a header set
        on it would reach every other request's calls: it is copied, never changed.
        """
        headers = dict(base.headers)
        headers.pop(RUN_HEADER, None)
        if request.run is not None:
            headers[RUN_HEADER] = request.run
        return _client_like(base, base_url=request.api_url, headers=headers, team_id=base.default_params.get("team_id"))


def _identity_or_refusal(once: SlackOnce, req: BoltRequest) -> SlackOnceRequest | BoltResponse:
    """The forward's identity, or the 400 a malformed or unsigned one is answered with."""
    try:
        return once.request_of(req)
    except ValueError as error:
        req.context.logger.error(f"slack-once: refused a forwarded request: {error}")
        return BoltResponse(status=400, body=str(error))


class _ForwardedIdentity(Middleware):
    """Right before Bolt's authorization: the forward's identity read (a malformed or unsigned
    one answered 400) into `context["slack_once"]`, where authorization finds it."""

    def __init__(self, once: SlackOnce):
        self.once = once

    def process(
        self,
        *,
        req: BoltRequest,
        resp: BoltResponse,
        next: Callable[[], BoltResponse],
    ) -> BoltResponse | None:
        request = _identity_or_refusal(self.once, req)
        if isinstance(request, BoltResponse):
            return request
        req.context["slack_once"] = request
        return next()

    @property
    def name(self) -> str:
        return "SlackOnceForwardedIdentity"


class _RunMiddleware(Middleware):
    """Binds the request's client, `say`, `respond` and `context["slack_once"]` to its run."""

    def __init__(self, once: SlackOnce):
        self.once = once

    def process(
        self,
        *,
        req: BoltRequest,
        resp: BoltResponse,
        next: Callable[[], BoltResponse],
    ) -> BoltResponse | None:
        # Read before authorization already, unless the app was built without app_options.
        request = req.context.get("slack_once") or _identity_or_refusal(self.once, req)
        if isinstance(request, BoltResponse):
            return request
        client = self.once.client_for(request, req.context.client)
        req.context["slack_once"] = request
        req.context["client"] = client
        for name in _CLIENT_BOUND_UTILITIES:
            req.context.pop(name, None)
        req.context["respond"] = GatewayRespond(client=client, response_url=req.context.response_url)
        # Bolt runs the listeners after the middleware chain has returned, in this thread: the
        # request's client stays this thread's until the next request it handles sets its own
        # (a late call names an ended run, and is refused rather than made unjournaled).
        _request_client.set(client)
        return next()

    @property
    def name(self) -> str:
        return "SlackOnce"


class _AppClient(WebClient):
    """The app's own client (`app.client`): a call made while a request is handled in this
    thread goes through that request's client, under its run, as `client` and `say` do."""

    def api_call(self, api_method: str, **kwargs: Any) -> Any:
        request_client = _request_client.get()
        if request_client is not None:
            return request_client.api_call(api_method, **kwargs)
        return super().api_call(api_method, **kwargs)


def _client_like(base: WebClient, *, base_url: str, headers: dict[str, str], team_id: str | None) -> WebClient:
    """A client with `base`'s settings (as Bolt builds each request's client) and these."""
    return WebClient(
        token=base.token,
        base_url=base_url,
        timeout=base.timeout,
        ssl=base.ssl,
        proxy=base.proxy,
        headers=headers,
        team_id=team_id,
        logger=base.logger,
        retry_handlers=list(base.retry_handlers) if base.retry_handlers is not None else None,
    )


def _header(req: BoltRequest, name: str) -> str | None:
    values = req.headers.get(name.lower())
    if not values:
        return None
    value = values[0].strip()
    return value or None


def _integer_header(req: BoltRequest, name: str) -> int | None:
    value = _header(req, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} is not an integer") from None
