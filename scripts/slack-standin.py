#!/usr/bin/env python3
"""A stand-in for Slack's Web API on 127.0.0.1, for trying slack-once by hand.

    scripts/slack-standin.py [PORT]          (default 4000)
    export SLACK_API_URL=http://127.0.0.1:4000/api SLACK_BOT_TOKEN=xoxb-local

Answers every write method as Slack would (chat.postMessage with a new ts, chat.update,
reactions.add, conversations.open…) and prints each call it receives (the token is never
printed); keeps the messages so that conversations.replies / conversations.history find them
by their metadata. Stop it with Ctrl-C.
"""
import json
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

messages = []
calls = 0


def arguments(handler, body):
    if handler.headers.get("Content-Type", "").startswith("application/json"):
        try:
            return json.loads(body)
        except ValueError:
            return {"unparsed": body.decode("utf-8", "replace")}
    return {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}


class Handler(BaseHTTPRequestHandler):
    def answer(self, answer):
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        found = [m for m in messages
                 if m.get("channel") == query.get("channel")
                 and ("ts" not in query or m.get("thread_ts") == query["ts"])]
        self.answer({"ok": True, "messages": found, "has_more": False})

    def do_POST(self):
        global calls
        length = int(self.headers.get("Content-Length") or 0)
        args = arguments(self, self.rfile.read(length))
        method = self.path.rstrip("/").rsplit("/", 1)[-1]
        calls += 1
        authorized = self.headers.get("Authorization", "").startswith("Bearer ")
        print(f"#{calls} {method} (bearer token: {'yes' if authorized else 'NO'}): "
              f"{json.dumps(args, ensure_ascii=False)}", flush=True)
        answer = {"ok": True}
        if method == "chat.postMessage":
            args["ts"] = f"1700000000.{calls:06d}"
            messages.append(args)
            answer.update(channel=args.get("channel"), ts=args["ts"])
        elif method == "chat.update":
            for m in messages:
                if m.get("ts") == args.get("ts"):
                    m.update({k: v for k, v in args.items() if k in ("text", "blocks")})
            answer.update(channel=args.get("channel"), ts=args.get("ts"))
        elif method == "conversations.open":
            answer["channel"] = {"id": "D" + str(args.get("users", "")).replace(",", "")}
        self.answer(answer)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    print(f"Slack stand-in on http://127.0.0.1:{port}/api", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
