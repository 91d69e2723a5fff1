"""The test bot as the gateway's tests start it (`.venv-bolt/bin/python tests/bots/bolt-python/app.py`),
against the gateway's stand-in of the adapter's tests: each listener does what tests/bots/README.md says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "adapters" / "bolt-python" / "tests"))

from gateway_standin import (  # noqa: E402
    Answer,
    GatewayStandin,
    app_mention_body,
    forward,
    global_shortcut_payload,
    interaction_body,
    slash_command_body,
    view_submission_payload,
)

APP = Path(__file__).resolve().parent / "app.py"
SECRET = "gateway-secret-for-bot-tests"
PROXY_TOKEN = "xoxb-slack-once-placeholder"
FORM = "application/x-www-form-urlencoded"


class BotProcess:
    """app.py in its own process, on a port it chose (`PORT=0`); its stderr in `log`."""

    def __init__(self, api_url: str, log: Path, env: dict[str, str] | None = None) -> None:
        environment = {
            **os.environ,
            "PORT": "0",
            "SLACK_ONCE_API_URL": api_url,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_BOT_TOKEN": PROXY_TOKEN,
            **(env or {}),
        }
        self.log = log
        with log.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(APP)], env=environment, stdout=subprocess.PIPE, stderr=stderr, text=True
            )
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            raise AssertionError(f"the bot's first line: {line!r}; its log:\n{log.read_text()}")
        self.port = int(line.split()[-1])

    def send(self, body: str, content_type: str, run: str, api_url: str) -> Answer:
        return forward(self.port, secret=SECRET, body=body, content_type=content_type, run=run, api_url=api_url)

    def stop(self) -> str:
        """Stops the bot (if it still runs); what else it printed to stdout."""
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=10)
        # Read through the same buffered reader as the first line: `communicate()` would read the
        # pipe beneath it and miss what that reader already holds.
        with self.process.stdout:
            return self.process.stdout.read()


@pytest.fixture
def gateway() -> Iterator[GatewayStandin]:
    standin = GatewayStandin()
    yield standin
    standin.close()


@pytest.fixture
def start_bot(gateway: GatewayStandin, tmp_path: Path) -> Iterator[Callable[..., BotProcess]]:
    """Starts app.py with these environment variables; every bot started is stopped at the end."""
    started: list[BotProcess] = []

    def start(**env: str) -> BotProcess:
        process = BotProcess(gateway.api_url, tmp_path / f"bot-{len(started)}.log", env)
        started.append(process)
        return process

    yield start
    for process in started:
        assert process.stop() == "", "the bot printed more than its one line"


@pytest.fixture
def bot(start_bot: Callable[..., BotProcess]) -> BotProcess:
    return start_bot()


def test_a_mention_gets_eyes_then_a_reply_in_its_thread(gateway, bot):
    answer = bot.send(
        app_mention_body(channel="C0GENERAL", ts="1700000000.000100"), "application/json", "run-1", gateway.api_url
    )
    assert answer.status == 200
    in_thread = bot.send(
        app_mention_body(channel="C0GENERAL", ts="1700000000.000300", thread_ts="1700000000.000200"),
        "application/json",
        "run-2",
        gateway.api_url,
    )
    assert in_thread.status == 200

    writes = [c for c in gateway.calls if c.method != "auth.test"]
    assert [(c.method, c.run) for c in writes] == [
        ("reactions.add", "run-1"),
        ("chat.postMessage", "run-1"),
        ("reactions.add", "run-2"),
        ("chat.postMessage", "run-2"),
    ]
    assert writes[0].args == {
        "channel": "C0GENERAL",
        "timestamp": "1700000000.000100",
        "name": "eyes",
        "team_id": "T0EXAMPLE",
    }
    assert writes[1].args["text"] == "Hello <@U0PERSON>"
    assert writes[1].args["thread_ts"] == "1700000000.000100"
    assert writes[3].args["thread_ts"] == "1700000000.000200"


def test_bot_exit_after_reaction_kills_the_bot_between_its_two_writes(gateway, start_bot):
    bot = start_bot(BOT_EXIT_AFTER_REACTION="1")
    with pytest.raises(ConnectionError):
        bot.send(
            app_mention_body(channel="C0GENERAL", ts="1700000000.000100"), "application/json", "run-1", gateway.api_url
        )
    assert bot.process.wait(timeout=10) == -9
    assert [c.method for c in gateway.calls if c.method != "auth.test"] == ["reactions.add"]


def test_bot_reply_delay_ms_waits_between_the_reaction_and_the_reply(gateway, start_bot):
    bot = start_bot(BOT_REPLY_DELAY_MS="600")
    answer = bot.send(
        app_mention_body(channel="C0GENERAL", ts="1700000000.000100"), "application/json", "run-1", gateway.api_url
    )
    assert answer.status == 200
    [reaction] = gateway.calls_of("reactions.add")
    [reply] = gateway.calls_of("chat.postMessage")
    assert reply.at - reaction.at >= 0.6
    assert answer.at >= reply.at


def test_ticket_is_acknowledged_with_content_then_responded_through_the_gateway(gateway, bot):
    body = slash_command_body(
        command="/ticket", text="printer on fire", response_url="https://hooks.slack.com/commands/T0EXAMPLE/1/x"
    )
    answer = bot.send(body, FORM, "run-ticket", gateway.api_url)

    assert answer.status == 200
    assert json.loads(answer.body) == {"response_type": "ephemeral", "text": "Filing your ticket…"}
    [respond] = gateway.calls_of("respond")
    assert respond.run == "run-ticket"
    assert respond.args == {"response_type": "in_channel", "text": "Ticket: printer on fire"}


def test_the_new_ticket_shortcut_opens_the_ticket_modal(gateway, bot):
    body = interaction_body(global_shortcut_payload(callback_id="new_ticket", trigger_id="1337.42.trigger"))
    answer = bot.send(body, FORM, "run-shortcut", gateway.api_url)

    assert answer.status == 200 and answer.body == ""
    [opened] = gateway.calls_of("views.open")
    assert opened.run == "run-shortcut"
    assert opened.args["trigger_id"] == "1337.42.trigger"
    view = opened.args["view"]  # slack_sdk sends views.open as JSON
    assert view["callback_id"] == "ticket_modal"
    [block] = view["blocks"]
    assert (block["type"], block["block_id"], block["element"]["type"], block["element"]["action_id"]) == (
        "input",
        "summary",
        "plain_text_input",
        "summary_text",
    )


def _submission(summary: str) -> str:
    values = {"summary": {"summary_text": {"type": "plain_text_input", "value": summary}}}
    return interaction_body(view_submission_payload(callback_id="ticket_modal", values=values))


def test_a_short_summary_is_answered_with_errors_and_nothing_posted(gateway, bot):
    answer = bot.send(_submission("hi"), FORM, "run-short", gateway.api_url)

    assert answer.status == 200
    assert json.loads(answer.body) == {"response_action": "errors", "errors": {"summary": "Say a little more"}}
    assert gateway.calls_of("chat.postMessage") == []


def test_a_summary_is_posted_to_the_ticket_channel(gateway, start_bot):
    bot = start_bot(BOT_TICKET_CHANNEL="C0OTHER")
    answer = bot.send(_submission("printer on fire"), FORM, "run-submit", gateway.api_url)
    assert answer.status == 200 and answer.body == ""
    [post] = gateway.calls_of("chat.postMessage")
    assert (post.run, post.args["channel"], post.args["text"]) == (
        "run-submit",
        "C0OTHER",
        "New ticket: printer on fire",
    )
