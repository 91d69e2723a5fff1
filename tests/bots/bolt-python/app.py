"""The Bolt for Python bot that the gateway's tests run behind `slack-once gateway`.

An ordinary Bolt app with the adapter's few lines; tests/bots/README.md says what each listener
does and which environment variables change it. The JavaScript twin behaves the same.
"""

import logging
import os
import signal
import sys
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

from slack_once_bolt import SlackOnce

for required in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"):
    if not os.environ.get(required):
        sys.exit(f"bolt-python test bot: {required} is not set")

once = SlackOnce(api_url=os.environ.get("SLACK_ONCE_API_URL"))
app = App(
    signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    **once.app_options(token=os.environ["SLACK_BOT_TOKEN"]),
)
once.install(app)

EXIT_AFTER_REACTION = os.environ.get("BOT_EXIT_AFTER_REACTION") == "1"
REPLY_DELAY_SECONDS = int(os.environ.get("BOT_REPLY_DELAY_MS", "0")) / 1000
TICKET_CHANNEL = os.environ.get("BOT_TICKET_CHANNEL", "C0TICKETS")


@app.event("app_mention")
def mention(event, client, say):
    client.reactions_add(channel=event["channel"], timestamp=event["ts"], name="eyes")
    if EXIT_AFTER_REACTION:
        # A kill between two writes: the reaction is made, the reply is not.
        os.kill(os.getpid(), signal.SIGKILL)
    if REPLY_DELAY_SECONDS > 0:
        time.sleep(REPLY_DELAY_SECONDS)
    say(text=f"Hello <@{event['user']}>", thread_ts=event.get("thread_ts") or event["ts"])


@app.command("/ticket")
def ticket(ack, respond, command):
    ack(response_type="ephemeral", text="Filing your ticket…")
    respond(response_type="in_channel", text="Ticket: " + command["text"])


@app.shortcut("new_ticket")
def new_ticket(ack, shortcut, client):
    client.views_open(
        trigger_id=shortcut["trigger_id"],
        view={
            "type": "modal",
            "callback_id": "ticket_modal",
            "title": {"type": "plain_text", "text": "New ticket"},
            "submit": {"type": "plain_text", "text": "File"},
            "blocks": [
                {
                    "type": "input",
                    "block_id": "summary",
                    "label": {"type": "plain_text", "text": "Summary"},
                    "element": {"type": "plain_text_input", "action_id": "summary_text"},
                }
            ],
        },
    )
    ack()


@app.function("summarize")
def summarize(inputs, client, complete):
    # A Workflow Builder step: a post with the step's client, then its completion.
    client.chat_postMessage(channel=TICKET_CHANNEL, text=f"Summary of {inputs['text']}")
    complete(outputs={"summary": f"{inputs['text']}: up"})


@app.view("ticket_modal")
def ticket_modal(ack, view, client):
    summary = view["state"]["values"]["summary"]["summary_text"]["value"] or ""
    if len(summary) < 3:
        ack(response_action="errors", errors={"summary": "Say a little more"})
        return
    ack()
    client.chat_postMessage(channel=TICKET_CHANNEL, text="New ticket: " + summary)


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread per request: the gateway forwards requests concurrently."""

    daemon_threads = True


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    port = int(os.environ.get("PORT", "3000"))
    server = make_server("127.0.0.1", port, SlackRequestHandler(app), ThreadingWSGIServer)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
