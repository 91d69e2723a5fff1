"""A small real HTTP server playing the slack-once gateway's part for the adapter's tests.

It forwards requests to the bot as the gateway does (the body signed under the shared secret,
the run's headers), and serves the Web API proxy: it records every call the bot makes (method,
headers, arguments) and answers Slack-shaped JSON, as the gateway answers with Slack's answer.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import itertools
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode

BOT_USER_ID = "UBOTUSER"


@dataclass
class RecordedCall:
    """One Web API call the bot made to the proxy."""

    method: str
    headers: dict[str, str]  # lower-cased names
    args: dict[str, Any]
    at: float  # time.monotonic() when it arrived

    @property
    def run(self) -> str | None:
        return self.headers.get("x-slack-once-request")


@dataclass
class Answer:
    """The bot's HTTP answer to a forward."""

    status: int
    body: str
    at: float  # time.monotonic() when it arrived


class GatewayStandin:
    """The Web API proxy at `api_url` (`http://127.0.0.1:<port>/api/`) and the forward."""

    def __init__(self) -> None:
        self.calls: list[RecordedCall] = []
        self.answers: dict[str, dict[str, Any]] = {}  # method -> the answer to give instead
        self.resets: dict[str, int] = {}  # method -> how many of its next calls get a reset, no answer
        self._lock = threading.Lock()
        self._ts = itertools.count(1)
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8")
                if not self.path.startswith("/api/"):
                    self._send(404, {"ok": False, "error": "unknown_method"})
                    return
                method = self.path[len("/api/") :].split("?", 1)[0]
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    args = json.loads(raw) if raw else {}
                else:
                    args = dict(parse_qsl(raw))
                headers = {name.lower(): value for name, value in self.headers.items()}
                standin._record(RecordedCall(method, headers, args, time.monotonic()))
                if standin._drops(method):
                    # The connection reset with no answer (SO_LINGER 0 makes the close an RST).
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                self._send(200, standin._answer(method, args))

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.api_url = f"http://127.0.0.1:{self.port}/api/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _record(self, call: RecordedCall) -> None:
        with self._lock:
            self.calls.append(call)

    def _drops(self, method: str) -> bool:
        with self._lock:
            if self.resets.get(method, 0) > 0:
                self.resets[method] -= 1
                return True
            return False

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method in self.answers:
            return self.answers[method]
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://example.slack.com/",
                "team": "Example",
                "user": "ticketbot",
                "team_id": "T0EXAMPLE",
                "user_id": BOT_USER_ID,
                "bot_id": "B0BOT",
            }
        if method == "chat.postMessage":
            ts = f"1700000000.{next(self._ts):06d}"
            return {
                "ok": True,
                "channel": args.get("channel"),
                "ts": ts,
                "message": {"text": args.get("text"), "ts": ts},
            }
        if method == "views.open":
            return {"ok": True, "view": {"id": "V0MODAL"}}
        return {"ok": True}

    def calls_of(self, method: str) -> list[RecordedCall]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def calls_of_run(self, run: str | None) -> list[RecordedCall]:
        with self._lock:
            return [c for c in self.calls if c.run == run]


def sign(secret: str, timestamp: str, body: str) -> str:
    """Slack's signature, as the gateway re-signs a forward: `v0=` HMAC-SHA256 of `v0:{ts}:{body}`."""
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return f"v0={digest}"


def forward(
    bot_port: int,
    *,
    secret: str,
    body: str,
    content_type: str,
    run: str | None,
    api_url: str | None,
    key: str = "T0EXAMPLE:C0GENERAL:1700000000.000100",
    attempt: int = 1,
    deadline_ms: int | None = None,
    timeout: float = 30,
    headers_secret: str | None = None,
    team: str | None = None,
    bot_user: str | None = None,
) -> Answer:
    """POSTs `body` to the bot as the gateway forwards a request from Slack."""
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": sign(secret, timestamp, body),
        "X-Slack-Once-Key": key,
        "X-Slack-Once-Attempt": str(attempt),
        "X-Slack-Once-Deadline": str(deadline_ms if deadline_ms is not None else int(time.time() * 1000) + 30_000),
    }
    if run is not None:
        headers["X-Slack-Once-Request"] = run
    if api_url is not None:
        headers["X-Slack-Once-Api-Url"] = api_url
    if team is not None:
        headers["X-Slack-Once-Team"] = team
    if bot_user is not None:
        headers["X-Slack-Once-Bot-User"] = bot_user
    if run is not None and api_url is not None:
        # The run and the address, signed as the gateway signs them (another secret: a forward
        # replayed with an address of its own).
        signed = f"{run}:{api_url}"
        headers["X-Slack-Once-Signature"] = sign(headers_secret or secret, timestamp, signed)
    connection = http.client.HTTPConnection("127.0.0.1", bot_port, timeout=timeout)
    try:
        connection.request("POST", "/slack/events", body=body.encode("utf-8"), headers=headers)
        response = connection.getresponse()
        text = response.read().decode("utf-8")
        return Answer(response.status, text, time.monotonic())
    finally:
        connection.close()


def app_mention_body(
    *,
    channel: str,
    ts: str,
    thread_ts: str | None = None,
    text: str = f"<@{BOT_USER_ID}> hello",
    user: str = "U0PERSON",
    team: str = "T0EXAMPLE",
) -> str:
    """An Events API envelope of an `app_mention` (in a thread when `thread_ts`), as Slack sends it."""
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return json.dumps(
        {
            "token": "unused",
            "team_id": team,
            "api_app_id": "A0APP",
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{ts.replace('.', '')}",
            "event_time": int(float(ts)),
            "authorizations": [{"team_id": team, "user_id": BOT_USER_ID, "is_bot": True}],
        }
    )


def slash_command_body(*, command: str, text: str, response_url: str) -> str:
    """A slash command's form body, as Slack sends it."""
    return urlencode(
        {
            "token": "unused",
            "team_id": "T0EXAMPLE",
            "team_domain": "example",
            "channel_id": "C0GENERAL",
            "channel_name": "general",
            "user_id": "U0PERSON",
            "user_name": "person",
            "command": command,
            "text": text,
            "api_app_id": "A0APP",
            "response_url": response_url,
            "trigger_id": "1337.42.abcdef",
        }
    )


def interaction_body(payload: dict[str, Any]) -> str:
    """An interaction's form body (`payload=` and its JSON), as Slack sends it."""
    return urlencode({"payload": json.dumps(payload)})


def global_shortcut_payload(*, callback_id: str, trigger_id: str = "1337.42.shortcut") -> dict[str, Any]:
    """A global shortcut's payload."""
    return {
        "type": "shortcut",
        "token": "unused",
        "action_ts": "1700000000.000900",
        "team": {"id": "T0EXAMPLE", "domain": "example"},
        "user": {"id": "U0PERSON", "username": "person", "team_id": "T0EXAMPLE"},
        "is_enterprise_install": False,
        "callback_id": callback_id,
        "trigger_id": trigger_id,
    }


def view_submission_payload(*, callback_id: str, values: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A modal's submission payload, its input values as `state.values`."""
    return {
        "type": "view_submission",
        "token": "unused",
        "api_app_id": "A0APP",
        "trigger_id": "1337.42.submission",
        "team": {"id": "T0EXAMPLE", "domain": "example"},
        "user": {"id": "U0PERSON", "username": "person", "team_id": "T0EXAMPLE"},
        "is_enterprise_install": False,
        "view": {
            "id": "V0MODAL",
            "team_id": "T0EXAMPLE",
            "type": "modal",
            "callback_id": callback_id,
            "state": {"values": values},
            "hash": "1700000000.abcdef",
            "private_metadata": "",
        },
        "response_urls": [],
    }
