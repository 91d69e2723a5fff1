# The Bolt for Python baseline of slack-once's benchmarks, its strongest peer: the same app_mention
# answered in its thread through the same Slack stand-in, by Bolt for Python's AWS Lambda adapter
# wrapped in Powertools for AWS Lambda's idempotency utility (its DynamoDB persistence layer, on
# DynamoDB Local), driven in-process as Lambda calls a handler.
#
#   python bench.py cold        handle one event, then print {"answered":true,"in_process_ms":…}
#   python bench.py warm N      handle N sequential events; print latency percentiles and RSS
#   python bench.py check       deliveries, retries, copies and a crash after the post: print what
#                               was posted and which DynamoDB calls were made; exit 1 if unexpected
#   python bench.py costs first|again N
#                               N people's messages numbered 0..N (the same N each run, on
#                               BENCH_TABLE): first deliveries, or Slack's retry 1 of each; exit 1
#                               unless each first posts once and each retry posts nothing (the
#                               report counts their DynamoDB requests at its proxy)
#   python bench.py serve PORT  the same Lambda handler behind an HTTP server on 127.0.0.1:PORT
#                               (one thread per connection), its listener a reaction then the
#                               reply, as the report's gateway section's Bolt for JavaScript app;
#                               prints {"listening":PORT}
#
# Environment: SECRET, SLACK_API_URL (the stand-in, e.g. http://127.0.0.1:PORT/api/),
# AWS_ENDPOINT_URL_DYNAMODB (or DYNAMODB_ENDPOINT), AWS_REGION, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, BENCH_TABLE (a table for this script alone, created if missing; default:
# a fresh one per process, deleted at its end). Both URLs must be on the loopback interface.
# Bolt is given its bot ids (an `authorize` function) so that it makes no auth.test call: its best
# case, as bench.js. Every event carries its own event_id, ts and client_msg_id, as a person's does.
import time

STARTED_NS = time.perf_counter_ns()  # in_process_ms counts from here, as bench.js from its first line

import datetime
import hashlib
import hmac
import http.client
import json
import os
import sys
import uuid
from urllib.parse import urlsplit

SECRET = os.environ.get("SECRET", "bench-secret")
BOT_TOKEN = "xoxb-bench"
SLACK_API_URL = os.environ.get("SLACK_API_URL", "http://127.0.0.1:4000/api/")
if not SLACK_API_URL.endswith("/"):
    SLACK_API_URL += "/"  # the WebClient joins method names onto its base URL
ENDPOINT = (os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get("DYNAMODB_ENDPOINT")
            or "http://127.0.0.1:8000")
# boto3 reads the service-specific endpoint variable itself; the rest keeps it from looking for
# credentials or a region anywhere else (never instance metadata).
os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = ENDPOINT
REGION = os.environ.setdefault("AWS_REGION", "us-east-1")
os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
os.environ.setdefault("AWS_LAMBDA_FUNCTION_NAME", "bolt-python-bench")  # part of Powertools' keys
OWN_TABLE = not os.environ.get("BENCH_TABLE")
TABLE = os.environ.get("BENCH_TABLE") or f"bolt-python-bench-{os.getpid()}-{time.time_ns()}"
LAMBDA_TIMEOUT_MS = int(os.environ.get("LAMBDA_TIMEOUT_MS", "10000"))  # template.yaml's Timeout: 10
EXPIRES_AFTER_SECONDS = 3600


def loopback(url):
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


for _url in (SLACK_API_URL, ENDPOINT):
    if not loopback(_url):
        sys.exit(f"bench.py: {_url} is not on the loopback interface; refusing to run")


# --- The table, made with the standard library alone ------------------------------------------
# A Lambda's table exists before its first event, so this setup is timed and left out of
# in_process_ms; it uses no boto3 so that it warms none of boto3's caches for the measured part.

def dynamodb(target, payload):
    """One signed (SigV4) DynamoDB JSON call; returns (HTTP status, parsed answer)."""
    body = json.dumps(payload).encode()
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    parts = urlsplit(ENDPOINT)
    headers = {"content-type": "application/x-amz-json-1.0", "host": parts.netloc,
               "x-amz-date": amz_date, "x-amz-target": f"DynamoDB_20120810.{target}"}
    names = sorted(headers)
    canonical = "\n".join(["POST", "/", "", "".join(f"{k}:{headers[k]}\n" for k in names),
                           ";".join(names), hashlib.sha256(body).hexdigest()])
    scope = f"{day}/{REGION}/dynamodb/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + os.environ["AWS_SECRET_ACCESS_KEY"]).encode()
    for part in (day, REGION, "dynamodb", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={os.environ['AWS_ACCESS_KEY_ID']}/"
                                f"{scope}, SignedHeaders={';'.join(names)}, Signature={signature}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
    try:
        conn.request("POST", parts.path or "/", body, headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def ensure_table():
    """The idempotency table as Powertools documents it: key `id` (S), on demand, TTL on `expiration`."""
    status, answer = dynamodb("DescribeTable", {"TableName": TABLE})
    if status == 200:
        return
    if "ResourceNotFoundException" not in answer.get("__type", ""):
        sys.exit(f"bench.py: DescribeTable {TABLE}: {status} {answer}")
    status, answer = dynamodb("CreateTable", {
        "TableName": TABLE, "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}]})
    if status != 200 and "ResourceInUseException" not in answer.get("__type", ""):
        sys.exit(f"bench.py: CreateTable {TABLE}: {status} {answer}")
    for _ in range(100):
        status, answer = dynamodb("DescribeTable", {"TableName": TABLE})
        if status == 200 and answer["Table"]["TableStatus"] == "ACTIVE":
            break
        time.sleep(0.05)
    else:
        sys.exit(f"bench.py: {TABLE} is not ACTIVE: {answer}")
    # Expired records are also refused by Powertools itself; TTL only deletes them eventually.
    status, answer = dynamodb("UpdateTimeToLive", {
        "TableName": TABLE,
        "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "expiration"}})
    if status != 200:
        sys.exit(f"bench.py: UpdateTimeToLive {TABLE}: {status} {answer}")


setup_started = time.perf_counter_ns()
ensure_table()
SETUP_NS = time.perf_counter_ns() - setup_started

# --- The app, as a careful production user writes it (a Lambda module's init phase) -------------
import logging  # noqa: E402

from aws_lambda_powertools.utilities.idempotency import (  # noqa: E402
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (  # noqa: E402
    IdempotencyAlreadyInProgressError,
)
from slack_bolt import App  # noqa: E402
from slack_bolt.adapter.aws_lambda import SlackRequestHandler  # noqa: E402
from slack_bolt.authorization import AuthorizeResult  # noqa: E402
from slack_sdk import WebClient  # noqa: E402

logger = logging.getLogger("bolt-python-bench")
logger.setLevel(logging.ERROR)
CRASH_AFTER_POST = os.environ.get("BENCH_CRASH_AFTER_POST") == "1"  # `check` only
REACT_FIRST = sys.argv[1:2] == ["serve"]  # the gateway section's listener: a reaction, then the reply
posts = 0


def authorize(enterprise_id, team_id):
    # Bolt for Python's equivalent of bench.js's botId/botUserId: with `token=` (even with
    # token_verification_enabled=False) Bolt calls auth.test on the first event to learn them.
    return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, bot_token=BOT_TOKEN,
                           bot_id="B0BENCH", bot_user_id="UBOT")


app = App(
    signing_secret=SECRET,
    authorize=authorize,
    process_before_response=True,  # on Lambda the reply must be posted before the response
    # retry_handlers=[]: no retry on a connection error, as bench.js's retries: 0
    client=WebClient(base_url=SLACK_API_URL, retry_handlers=[]),
    logger=logger,
)


@app.event("app_mention")
def answer_mention(event, say, client):
    global posts
    if REACT_FIRST:
        client.reactions_add(channel=event["channel"], timestamp=event["ts"], name="eyes")
    say(text=f"<@{event['user']}> you said it. This is my one answer to it.",
        thread_ts=event.get("thread_ts") or event["ts"])
    posts += 1
    if CRASH_AFTER_POST:
        os._exit(70)  # the process dies after the post, before Powertools records the result


slack_handler = SlackRequestHandler(app)

# One message, one answer: keyed by the message's client_msg_id (every event carrying the same
# message, and Slack's retries of each, share it), falling back to the event_id for events whose
# message has none (posted by an app, a workflow or the API); scoped by the team. @idempotent
# calls config.register_lambda_context(context) itself, so an INPROGRESS record expires when the
# invocation would have timed out.
idempotency_config = IdempotencyConfig(
    event_key_jmespath="powertools_json(body).[team_id, event.client_msg_id || event_id]",
    expires_after_seconds=EXPIRES_AFTER_SECONDS,  # Slack's last retry comes ~5 min after the event
)
persistence_layer = DynamoDBPersistenceLayer(table_name=TABLE)


class NotAnswered(Exception):
    """A response that must not be saved as the event's answer (401, 404, a listener's 500…)."""

    def __init__(self, response):
        super().__init__(response["statusCode"])
        self.response = response


@idempotent(config=idempotency_config, persistence_store=persistence_layer)
def answer_once(event, context):
    response = slack_handler.handle(event, context)
    if response["statusCode"] != 200:
        raise NotAnswered(response)  # Powertools deletes the INPROGRESS record: Slack may retry
    return response


def lambda_handler(event, context):
    try:
        return answer_once(event, context)
    except NotAnswered as refused:
        return refused.response
    except IdempotencyAlreadyInProgressError:
        # Another invocation holds this message: not a 2xx, so Slack retries it later.
        return {"statusCode": 409, "body": "", "headers": {}}


# --- The driver ----------------------------------------------------------------------------------

class LambdaContext:
    """What the Python runtime hands a handler, for one invocation."""

    def __init__(self, timeout_ms=LAMBDA_TIMEOUT_MS):
        self._deadline = time.monotonic() + timeout_ms / 1000
        self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:000000000000:function:{self.function_name}"
        self.memory_limit_in_mb = 256
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "2026/01/01/[$LATEST]bench"

    def get_remaining_time_in_millis(self):
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def new_message(client_msg_id=True):
    """A person's message: its own event_id, ts and client_msg_id."""
    return {"event_id": "Ev" + uuid.uuid4().hex[:10].upper(), "ts": f"{time.time():.6f}",
            "client_msg_id": str(uuid.uuid4()) if client_msg_id else None}


def lambda_event(message, retry_num=None, secret=SECRET):
    """A Function URL (payload v2) event wrapping the signed event_callback, as bench.js's."""
    event = {"type": "app_mention", "user": "U0001", "text": "<@UBOT> benchmark", "ts": message["ts"],
             "channel": "C0001", "event_ts": message["ts"]}
    if message["client_msg_id"]:
        event["client_msg_id"] = message["client_msg_id"]
    body = json.dumps({
        "token": "unused", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": message["event_id"], "event_time": int(float(message["ts"])), "event": event,
        "authorizations": [{"team_id": "T0001", "user_id": "UBOT", "is_bot": True}],
    }, separators=(",", ":"))
    ts = str(int(time.time()))
    sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    headers = {"content-type": "application/json", "x-slack-request-timestamp": ts,
               "x-slack-signature": sig}
    if retry_num is not None:
        headers.update({"x-slack-retry-num": str(retry_num), "x-slack-retry-reason": "http_timeout"})
    return {
        "version": "2.0", "routeKey": "$default", "rawPath": "/slack/events", "rawQueryString": "",
        "headers": headers,
        "requestContext": {"http": {"method": "POST", "path": "/slack/events"}},
        "body": body, "isBase64Encoded": False,
    }


def print_json(value):
    print(json.dumps(value, separators=(",", ":")), flush=True)


def rss_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cold():
    before = posts
    response = lambda_handler(lambda_event(new_message()), LambdaContext())
    ms = (time.perf_counter_ns() - STARTED_NS - SETUP_NS) / 1e6
    answered = response["statusCode"] == 200 and posts == before + 1
    print_json({"answered": answered, "in_process_ms": ms, "setup_ms": SETUP_NS / 1e6})
    return answered


def warm(n):
    import resource

    idle_rss = rss_bytes()
    lat = []
    for i in range(n):
        event, context = lambda_event(new_message()), LambdaContext()
        before = posts
        t0 = time.perf_counter_ns()
        response = lambda_handler(event, context)
        lat.append((time.perf_counter_ns() - t0) / 1e3)
        if response["statusCode"] != 200 or posts != before + 1:
            raise RuntimeError(f"event {i}: status {response['statusCode']}, {posts - before} posts")
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(p / 100 * len(lat)))]

    print_json({"n": n, "p50_us": pct(50), "p99_us": pct(99), "idle_rss": idle_rss,
                "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
    return True


def check():
    """Each first delivery posts once; a Slack retry or a copy of a message posts nothing; a
    refused request does not hold the message; and the window Powertools leaves: a process that
    dies after the post and before the result is saved. Every connection and DynamoDB call is
    recorded."""
    import socket
    import subprocess

    connections, calls = set(), []
    connect = socket.socket.connect

    def recording_connect(sock, address):
        connections.add(f"{address[0]}:{address[1]}")
        return connect(sock, address)

    socket.socket.connect = recording_connect
    persistence_layer.client.meta.events.register(
        "after-call.dynamodb", lambda model, **_: calls.append(model.name))

    results, ok = [], True

    def deliver(name, event, expect_status, expect_posts):
        nonlocal ok
        before_posts, before_calls = posts, len(calls)
        status = lambda_handler(event, LambdaContext())["statusCode"]
        passed = status == expect_status and posts - before_posts == expect_posts
        ok &= passed
        results.append({"delivery": name, "status": status, "posts": posts - before_posts,
                        "dynamodb": calls[before_calls:], "as_expected": passed})

    a = new_message()
    deliver("first delivery of message A", lambda_event(a), 200, 1)
    deliver("Slack's retry 1 of A (same event_id, client_msg_id)", lambda_event(a, retry_num=1), 200, 0)
    deliver("Slack's retry 2 of A", lambda_event(a, retry_num=2), 200, 0)
    deliver("A under a new event_id (another event of the same message)",
            lambda_event({**a, "event_id": "Ev" + uuid.uuid4().hex[:10].upper()}), 200, 0)
    b = new_message()
    deliver("message B with a bad signature", lambda_event(b, secret="forged"), 401, 0)
    deliver("message B, genuine (the refused copy held nothing)", lambda_event(b), 200, 1)
    c = new_message(client_msg_id=False)
    deliver("message C without client_msg_id (keyed by event_id)", lambda_event(c), 200, 1)
    deliver("Slack's retry 1 of C", lambda_event(c, retry_num=1), 200, 0)

    # The window: a process that posts, then dies before Powertools saves the result. Its
    # INPROGRESS record holds the message until the invocation's deadline (here 1.5 s, as if the
    # Lambda's timeout were that), then the next retry runs the handler again.
    d = new_message()
    timeout_ms = 1500
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "one"], input=json.dumps(lambda_event(d)),
        env={**os.environ, "BENCH_TABLE": TABLE, "BENCH_CRASH_AFTER_POST": "1",
             "LAMBDA_TIMEOUT_MS": str(timeout_ms)}, capture_output=True, text=True, timeout=60)
    crashed_at = time.monotonic()
    child_posted = child.returncode == 70
    ok &= child_posted
    results.append({"delivery": f"message D in a process that dies after its post (Lambda timeout {timeout_ms} ms)",
                    "exit_code": child.returncode, "posts": 1 if child_posted else 0,
                    "as_expected": child_posted, "stderr": child.stderr[-500:]})
    deliver("Slack's retry 1 of D, at once (D is INPROGRESS)", lambda_event(d, retry_num=1), 409, 0)
    time.sleep(max(0.0, timeout_ms / 1000 + 0.2 - (time.monotonic() - crashed_at)))
    deliver("Slack's retry 2 of D, after the dead invocation's deadline: answered AGAIN",
            lambda_event(d, retry_num=2), 200, 1)

    allowed = {f"{urlsplit(u).hostname}:{urlsplit(u).port}" for u in (SLACK_API_URL, ENDPOINT)}
    ok &= connections <= allowed
    print(json.dumps({"ok": ok, "results": results, "posts_by_this_process": posts,
                      "posts_in_all": posts + (1 if child_posted else 0),
                      "connections": sorted(connections), "table": TABLE}, indent=1), flush=True)
    return ok


def costs(phase, n):
    for i in range(n):
        message = {"event_id": f"EvCost{i:06d}", "ts": f"1767225600.{i:06d}",
                   "client_msg_id": f"00000000-0000-4000-8000-{i:012d}"}
        before = posts
        response = lambda_handler(lambda_event(message, None if phase == "first" else 1),
                                  LambdaContext())
        expected = 1 if phase == "first" else 0
        if response["statusCode"] != 200 or posts != before + expected:
            raise RuntimeError(f"{phase} {i}: status {response['statusCode']}, {posts - before} posts")
    print_json({"phase": phase, "n": n})
    return True


def serve(port):
    """Slack's requests over HTTP, each handed to the Lambda handler as a Function URL event."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Slack's and the report's clients use it

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
            event = {
                "version": "2.0", "routeKey": "$default", "rawPath": self.path, "rawQueryString": "",
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "requestContext": {"http": {"method": "POST", "path": self.path}},
                "body": body, "isBase64Encoded": False,
            }
            response = lambda_handler(event, LambdaContext())
            payload = (response.get("body") or "").encode()
            self.send_response(response["statusCode"])
            for k, v in (response.get("headers") or {}).items():
                if k.lower() != "content-length":
                    self.send_header(k, v if isinstance(v, str) else ",".join(v))
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print_json({"listening": port})
    server.serve_forever()
    return True


def one():
    """`check`'s child: handle the Lambda event read from standard input."""
    print_json(lambda_handler(json.load(sys.stdin), LambdaContext()))
    return True


def finish(passed):
    sys.stdout.flush()
    if OWN_TABLE and sys.argv[1:2] != ["one"]:
        dynamodb("DeleteTable", {"TableName": TABLE})
    # As bench.js's process.exit: a Lambda never tears its interpreter down after an event, so
    # neither does this (module teardown would only add to the spawn → exit time the report sees).
    os._exit(0 if passed else 1)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "cold"
    try:
        if mode == "cold":
            passed = cold()
        elif mode == "warm":
            passed = warm(int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
        elif mode == "check":
            passed = check()
        elif mode == "serve":
            passed = serve(int(sys.argv[2]))
        elif mode == "one":
            passed = one()
        elif mode == "costs":
            passed = costs(sys.argv[2], int(sys.argv[3]))
        else:
            sys.exit("usage: bench.py cold | warm N | check | costs first|again N | serve PORT")
    except Exception:
        import traceback

        traceback.print_exc()
        passed = False
    finish(passed)
