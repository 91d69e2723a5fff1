"""A real Bolt for Python app with the adapter, served over HTTP, against the gateway's stand-in."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_sdk.errors import SlackApiError

from slack_once_bolt import SlackOnce, SlackOnceRequest

from gateway_standin import GatewayStandin, app_mention_body, forward, slash_command_body

SECRET = "gateway-secret-for-tests"
PROXY_TOKEN = "xoxb-slack-once-placeholder"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Bot:
    """A Bolt app built as the adapter's README says, served by a threaded WSGI server."""

    def __init__(
        self,
        api_url: str,
        listeners: Callable[[App], None],
        before_install: Callable[[App], None] | None = None,
        **app_options: Any,
    ) -> None:
        self.once = SlackOnce(api_url=api_url)
        self.app = App(signing_secret=SECRET, **self.once.app_options(token=PROXY_TOKEN, **app_options))
        if before_install is not None:
            before_install(self.app)
        self.once.install(self.app)
        listeners(self.app)
        self._server = make_server("127.0.0.1", 0, SlackRequestHandler(self.app), _ThreadingWSGIServer, _QuietHandler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def gateway() -> Iterator[GatewayStandin]:
    standin = GatewayStandin()
    yield standin
    standin.close()


@pytest.fixture
def bots() -> Iterator[Callable[..., Bot]]:
    started: list[Bot] = []

    def start(api_url: str, listeners: Callable[[App], None], **options: Any) -> Bot:
        bot = Bot(api_url, listeners, **options)
        started.append(bot)
        return bot

    yield start
    for bot in started:
        bot.close()


def _eventually(look: Callable[[], list[Any]], within: float = 5.0) -> list[Any]:
    """What `look` finds once it finds something (a listener still running after the answer)."""
    give_up = time.monotonic() + within
    while not (found := look()) and time.monotonic() < give_up:
        time.sleep(0.05)
    return found


def test_concurrent_requests_each_send_their_own_run_on_every_call(gateway, bots):
    other_gateway = GatewayStandin()
    try:
        both_started = threading.Barrier(2, timeout=10)

        def listeners(app: App) -> None:
            @app.event("app_mention")
            def answer(event, client, say, context):
                client.reactions_add(channel=event["channel"], timestamp=event["ts"], name="eyes")
                both_started.wait()  # each listener's first call is made before either's second
                time.sleep(0.3)
                say(text="hello", thread_ts=event["ts"])
                context.client.chat_postMessage(channel=event["channel"], text="done", thread_ts=event["ts"])

        bot = bots(gateway.api_url, listeners)
        answers: dict[str, Any] = {}

        def deliver(run: str, api_url: str, ts: str) -> None:
            answers[run] = forward(
                bot.port,
                secret=SECRET,
                body=app_mention_body(channel="C0GENERAL", ts=ts),
                content_type=JSON,
                run=run,
                api_url=api_url,
            )

        deliveries = [
            threading.Thread(target=deliver, args=("run-a", gateway.api_url, "1700000000.000100")),
            threading.Thread(target=deliver, args=("run-b", other_gateway.api_url, "1700000000.000200")),
        ]
        for d in deliveries:
            d.start()
        for d in deliveries:
            d.join(timeout=20)
        assert answers["run-a"].status == 200 and answers["run-b"].status == 200

        for standin, run, ts in (
            (gateway, "run-a", "1700000000.000100"),
            (other_gateway, "run-b", "1700000000.000200"),
        ):
            calls = [c for c in standin.calls if c.method != "auth.test"]
            assert [c.method for c in calls] == ["reactions.add", "chat.postMessage", "chat.postMessage"]
            assert [c.run for c in calls] == [run, run, run], "a call carried another request's run"
            assert all(c.args.get("timestamp", c.args.get("thread_ts")) == ts for c in calls)
            assert all(c.headers["authorization"] == f"Bearer {PROXY_TOKEN}" for c in calls)
    finally:
        other_gateway.close()


def test_the_sdks_retry_after_a_reset_connection_is_sent_again_under_the_same_run(gateway, bots):
    gateway.resets["chat.postMessage"] = 1  # the first post's connection is reset, unanswered
    gateway.resets["respond"] = 1
    posted: list[str] = []

    def listeners(app: App) -> None:
        @app.command("/ticket")
        def ticket(ack, client, respond):
            ack()
            posted.append(client.chat_postMessage(channel="C0GENERAL", text="filed")["ts"])
            respond(text="filed")

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=slash_command_body(command="/ticket", text="x", response_url="https://hooks.slack.com/commands/T/1/x"),
        content_type=FORM,
        run="run-retried",
        api_url=gateway.api_url,
    )

    assert answer.status == 200
    assert len(posted) == 1, "the listener saw the reset instead of the retry's answer"
    for method in ("chat.postMessage", "respond"):
        first, retry = gateway.calls_of(method)
        assert (first.run, retry.run) == ("run-retried", "run-retried")
        assert first.args == retry.args  # the same write: the gateway answers it as the same step


def test_respond_is_posted_to_the_gateway_with_the_run_never_to_the_response_url(gateway, bots):
    response_url_standin = GatewayStandin()  # records anything posted to the response_url
    try:

        def listeners(app: App) -> None:
            @app.command("/ticket")
            def ticket(ack, respond, command):
                ack(response_type="ephemeral", text="Filing your ticket…")
                respond(response_type="in_channel", text="Ticket: " + command["text"])

        bot = bots(gateway.api_url, listeners)
        answer = forward(
            bot.port,
            secret=SECRET,
            body=slash_command_body(
                command="/ticket", text="printer on fire", response_url=response_url_standin.api_url + "respond"
            ),
            content_type=FORM,
            run="run-command",
            api_url=gateway.api_url,
        )

        assert answer.status == 200
        assert json.loads(answer.body) == {"response_type": "ephemeral", "text": "Filing your ticket…"}
        [respond_call] = gateway.calls_of("respond")
        assert respond_call.run == "run-command"
        assert respond_call.headers["authorization"] == f"Bearer {PROXY_TOKEN}"
        assert respond_call.headers["content-type"].startswith("application/json")
        assert respond_call.args == {"response_type": "in_channel", "text": "Ticket: printer on fire"}
        assert response_url_standin.calls == []
    finally:
        response_url_standin.close()


def test_respond_given_a_whole_message_posts_it_as_bolt_would(gateway, bots):
    def listeners(app: App) -> None:
        @app.command("/ticket")
        def ticket(ack, respond):
            ack()
            respond({"text": "replaced", "replace_original": True, "blocks": []})

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=slash_command_body(command="/ticket", text="x", response_url="https://hooks.slack.com/commands/T/1/x"),
        content_type=FORM,
        run="run-dict",
        api_url=gateway.api_url,
    )

    assert answer.status == 200
    [respond_call] = gateway.calls_of("respond")
    assert (respond_call.run, respond_call.args) == ("run-dict", {"text": "replaced", "replace_original": True})


def test_the_answer_comes_only_after_the_listener_ended(gateway, bots):
    def listeners(app: App) -> None:
        @app.command("/ticket")
        def ticket(ack, respond):
            ack()
            time.sleep(0.5)
            respond(text="filed")

    bot = bots(gateway.api_url, listeners)
    sent = time.monotonic()
    answer = forward(
        bot.port,
        secret=SECRET,
        body=slash_command_body(command="/ticket", text="x", response_url="https://hooks.slack.com/commands/T/1/x"),
        content_type=FORM,
        run="run-slow",
        api_url=gateway.api_url,
    )

    assert answer.status == 200
    [respond_call] = _eventually(lambda: gateway.calls_of("respond"))
    assert answer.at >= respond_call.at, "the app answered before its listener's last call"
    assert answer.at - sent >= 0.5


def test_a_request_signed_with_another_secret_is_refused(gateway, bots):
    ran: list[str] = []

    def listeners(app: App) -> None:
        @app.event("app_mention")
        def answer(event, say):
            ran.append(event["ts"])
            say(text="hello")

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret="not-the-gateway-secret",
        body=app_mention_body(channel="C0GENERAL", ts="1700000000.000300"),
        content_type=JSON,
        run="run-forged",
        api_url=gateway.api_url,
    )

    assert answer.status == 401
    assert ran == []
    assert gateway.calls == []


def test_a_call_outside_any_request_goes_to_the_configured_url_without_a_run(gateway, bots):
    def listeners(app: App) -> None:
        @app.event("app_mention")
        def answer(event, say):
            say(text="hello")

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=app_mention_body(channel="C0GENERAL", ts="1700000000.000400"),
        content_type=JSON,
        run="run-before",
        api_url=gateway.api_url,
    )
    assert answer.status == 200

    bot.app.client.chat_postMessage(channel="C0REPORTS", text="the nightly report")

    assert gateway.calls_of("auth.test") == [], "the gateway names the workspace: no auth.test"
    [during, outside] = gateway.calls_of("chat.postMessage")
    assert during.run == "run-before"
    assert outside.args["channel"] == "C0REPORTS"
    assert outside.run is None
    assert outside.headers["authorization"] == f"Bearer {PROXY_TOKEN}"
    assert [name for name in bot.app.client.headers if name.lower().startswith("x-slack-once")] == []


def test_a_refusal_of_the_gateway_is_the_sdks_slack_api_error(gateway, bots):
    gateway.answers["chat.postMessage"] = {"ok": False, "error": "slack_once_request_ended"}
    gateway.answers["respond"] = {"ok": False, "error": "slack_once_different_write"}
    errors: list[str] = []

    def listeners(app: App) -> None:
        @app.command("/ticket")
        def ticket(ack, respond, client):
            ack()
            for write in (lambda: client.chat_postMessage(channel="C0GENERAL", text="x"), lambda: respond(text="y")):
                try:
                    write()
                except SlackApiError as error:
                    errors.append(error.response["error"])

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=slash_command_body(command="/ticket", text="x", response_url="https://hooks.slack.com/commands/T/1/x"),
        content_type=FORM,
        run="run-ended",
        api_url=gateway.api_url,
    )

    assert answer.status == 200
    assert errors == ["slack_once_request_ended", "slack_once_different_write"]


def test_the_listener_reads_the_requests_identity_from_the_context(gateway, bots):
    seen: list[SlackOnceRequest] = []

    def listeners(app: App) -> None:
        @app.event("app_mention")
        def answer(context):
            seen.append(context["slack_once"])

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=app_mention_body(channel="C0GENERAL", ts="1700000000.000500"),
        content_type=JSON,
        run="run-takeover",
        api_url=gateway.api_url,
        key="T0EXAMPLE:C0GENERAL:1700000000.000500",
        attempt=2,
        deadline_ms=1_900_000_000_000,
    )

    assert answer.status == 200
    assert seen == [
        SlackOnceRequest(
            run="run-takeover",
            key="T0EXAMPLE:C0GENERAL:1700000000.000500",
            attempt=2,
            deadline_ms=1_900_000_000_000,
            api_url=gateway.api_url,
        )
    ]


def test_say_bound_by_an_earlier_middleware_still_carries_the_run(gateway, bots):
    def middleware(app: App) -> None:
        @app.use
        def reads_say_and_respond(say, respond, next):  # Bolt builds say() and respond() for it
            next()

    def listeners(app: App) -> None:
        @app.event("app_mention")
        def answer(say):
            say(text="hello")

    bot = bots(gateway.api_url, listeners, before_install=middleware)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=app_mention_body(channel="C0GENERAL", ts="1700000000.000600"),
        content_type=JSON,
        run="run-say",
        api_url=gateway.api_url,
    )

    assert answer.status == 200
    [post] = gateway.calls_of("chat.postMessage")
    assert post.run == "run-say"


def test_a_malformed_run_name_is_refused_before_any_listener(gateway, bots):
    ran: list[str] = []

    def listeners(app: App) -> None:
        @app.event("app_mention")
        def answer(event):
            ran.append(event["ts"])

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=app_mention_body(channel="C0GENERAL", ts="1700000000.000700"),
        content_type=JSON,
        run="run with spaces",
        api_url=gateway.api_url,
    )

    assert answer.status == 400
    assert ran == []


def test_install_refuses_an_app_that_answers_before_its_listeners_end(gateway):
    once = SlackOnce(api_url=gateway.api_url)
    options = once.app_options(token=PROXY_TOKEN)
    options["process_before_response"] = False
    app = App(signing_secret=SECRET, **options)
    with pytest.raises(ValueError, match="process_before_response"):
        once.install(app)


def test_a_forward_whose_address_is_not_signed_by_the_gateway_is_refused(gateway, bots):
    # A forward replayed with an address of its own: the bot would send its token there.
    ran: list[str] = []

    def listeners(app: App) -> None:
        @app.event("app_mention")
        def answer(event, client):
            ran.append(event["ts"])
            client.reactions_add(channel=event["channel"], timestamp=event["ts"], name="eyes")

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=app_mention_body(channel="C0GENERAL", ts="1700000000.000800"),
        content_type=JSON,
        run="run-elsewhere",
        api_url=gateway.api_url,
        headers_secret="another-secret-than-the-apps",
    )

    assert answer.status == 400
    assert ran == []
    assert gateway.calls_of_run("run-elsewhere") == []


def test_bolts_authorization_is_the_workspace_and_bot_user_the_gateway_names(gateway, bots):
    seen: list[tuple[str | None, str | None, str | None]] = []

    def listeners(app: App) -> None:
        @app.event("app_mention")
        def answer(context):
            seen.append((context.team_id, context.bot_user_id, context.bot_token))

    bot = bots(gateway.api_url, listeners)
    for team, bot_user, ts in [("T0WSA", "U0BOTA", "1700000000.000910"), ("T0WSB", "U0BOTB", "1700000000.000920")]:
        answer = forward(
            bot.port,
            secret=SECRET,
            body=app_mention_body(channel="C0GENERAL", ts=ts, team=team),
            content_type=JSON,
            run=f"run-{team}",
            api_url=gateway.api_url,
            team=team,
            bot_user=bot_user,
        )
        assert answer.status == 200

    assert seen == [("T0WSA", "U0BOTA", PROXY_TOKEN), ("T0WSB", "U0BOTB", PROXY_TOKEN)]
    assert gateway.calls_of("auth.test") == []


def test_app_client_used_inside_a_listener_names_the_requests_run(gateway, bots):
    def listeners(app: App) -> None:
        @app.event("app_mention")
        def answer(event):
            # The app's module-level client, as many Bolt apps call it from a listener: a write
            # made while the request is handled, which a second run must not make again.
            app.client.chat_postMessage(channel=event["channel"], text="hello", thread_ts=event["ts"])

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=app_mention_body(channel="C0GENERAL", ts="1700000000.000930"),
        content_type=JSON,
        run="run-app-client",
        api_url=gateway.api_url,
    )
    assert answer.status == 200
    [post] = gateway.calls_of("chat.postMessage")
    assert post.run == "run-app-client", (
        "a write through app.client inside a listener went to the gateway unjournaled (no run): "
        "Slack's retry of the request would make it again"
    )


def _message_changed_body(*, author: str, ts: str) -> str:
    return json.dumps(
        {
            "token": "unused", "team_id": "T0EXAMPLE", "api_app_id": "A0EXAMPLE", "type": "event_callback",
            "event_id": f"Ev{ts.replace('.', '')}", "event_time": 1700000000,
            "event": {
                "type": "message", "subtype": "message_changed", "hidden": True, "channel": "C0GENERAL",
                "ts": "1700000100.000200", "event_ts": "1700000100.000200",
                "message": {"type": "message", "user": author, "bot_id": "B0BOT", "text": "edited", "ts": ts},
                "previous_message": {"type": "message", "user": author, "bot_id": "B0BOT", "text": "before", "ts": ts},
            },
            "authorizations": [{"team_id": "T0EXAMPLE", "user_id": author, "is_bot": True}],
        }
    )


def test_an_edit_of_the_bots_own_message_is_ignored_as_bolt_ignores_its_own_events(gateway, bots):
    heard: list[str] = []

    def listeners(app: App) -> None:
        @app.event("message")
        def changed(event):
            heard.append(event.get("subtype"))

    bot = bots(gateway.api_url, listeners)
    answer = forward(
        bot.port,
        secret=SECRET,
        body=_message_changed_body(author="U0BOTSELF", ts="1700000000.000940"),
        content_type=JSON,
        run="run-own-edit",
        api_url=gateway.api_url,
        team="T0EXAMPLE",
        bot_user="U0BOTSELF",
    )
    assert answer.status == 200
    assert heard == [], "the bot's own edit (its chat.update) reached the listener: a bot that edits on edits loops"


def test_the_bots_own_events_are_ignored_with_its_own_ids_when_the_forward_names_no_bot_user(gateway, bots):
    heard: list[str] = []

    def listeners(app: App) -> None:
        @app.event("message")
        def changed(event):
            heard.append(event.get("subtype"))

        @app.event("reaction_added")
        def reacted(event):
            heard.append(f"reaction by {event['user']}")

    bot = bots(gateway.api_url, listeners, bot_user_id="U0BOTSELF", bot_id="B0BOT")
    # An event whose one authorization is a person's (an app with user scopes): the gateway
    # names no bot user. Bolt with auth.test would know its own and ignore these.
    own_edit = json.loads(_message_changed_body(author="U0BOTSELF", ts="1700000000.000950"))
    own_edit["authorizations"] = [{"team_id": "T0EXAMPLE", "user_id": "U0PERSON", "is_bot": False}]
    own_reaction = dict(own_edit, event_id="EvOwnReaction")
    own_reaction["event"] = {
        "type": "reaction_added", "user": "U0BOTSELF", "reaction": "eyes",
        "item": {"type": "message", "channel": "C0GENERAL", "ts": "1700000000.000950"},
        "event_ts": "1700000000.000960",
    }
    for n, body in enumerate([own_edit, own_reaction]):
        answer = forward(
            bot.port, secret=SECRET, body=json.dumps(body), content_type=JSON,
            run=f"run-own-{n}", api_url=gateway.api_url, team="T0EXAMPLE",
        )
        assert answer.status == 200
    assert heard == [], "the bot's own events reached its listeners"
