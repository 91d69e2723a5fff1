#!/usr/bin/env python3
"""A stand-in for Slack's Web API on 127.0.0.1, for trying slack-once by hand.

    scripts/slack-standin.py [PORT]          (default 4000)
    export SLACK_API_URL=http://127.0.0.1:4000/api SLACK_BOT_TOKEN=xoxb-local

Answers chat.postMessage with {"ok": true} and prints each post it receives (the token is
not printed). Stop it with Ctrl-C.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

posts = 0


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        global posts
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path.rstrip("/").endswith("/chat.postMessage"):
            posts += 1
            try:
                message = json.loads(body)
            except ValueError:
                message = {"unparsed": body.decode("utf-8", "replace")}
            authorized = self.headers.get("Authorization", "").startswith("Bearer ")
            print(f"post #{posts} (bearer token: {'yes' if authorized else 'NO'}): "
                  f"{json.dumps(message, ensure_ascii=False)}", flush=True)
            answer = {"ok": True, "channel": message.get("channel"), "ts": f"1700000000.{posts:06d}"}
        else:
            answer = {"ok": False, "error": "unknown_method"}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    print(f"Slack stand-in on http://127.0.0.1:{port}/api", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
