#!/usr/bin/env python3
"""A stand-in for Slack's Web API on 127.0.0.1 that behaves like Slack wherever a bot's
correctness can depend on it (standard library only). Stop it with Ctrl-C.

    scripts/slack-standin.py [PORT] [options]          (PORT default 4000)
    export SLACK_API_URL=http://127.0.0.1:4000/api SLACK_BOT_TOKEN=xoxb-local

One workspace with one app installed (more with OAuth, below). Options:
  --team T0001TEAM --app-id A0001APP --bot-id B0001BOT --bot-user U0456BOT --bot-name slack-once
                            the identity every message posted with the bot token carries
                            (the defaults match tests/data/app_mention.body.json)
  --token TOKEN             accept only this bot token (others: invalid_auth, as after a
                            rotation); by default any `xoxb-…` token is the bot's
  --page-cap N              most messages a conversations.history/.replies page holds
                            (default 15: Slack's cap since 2025-05-29 for new commercially
                            distributed non-Marketplace apps; 999 for the others)
  --history-per-minute N    calls of conversations.history, and separately of .replies, allowed
                            in a rolling minute; more answer HTTP 429 + Retry-After (those apps
                            get 1; default unlimited)
  --stream-expiry SECONDS   a stream (chat.startStream) stops taking appends this long after it
                            starts: message_not_in_streaming_state (Slack: about 300; default 300)
  --seed FILE               (repeatable) an Events API body (an event_callback); its event's
                            message (channel, ts, user, text, thread_ts) exists from the start
  --client-id ID --client-secret SECRET
                            the app's OAuth credentials (together; default none: no OAuth, and
                            everything behaves as without these lines). The secret is never printed.
  --workflow-token-seconds N
                            a workflow token (xwfp-) answers token_expired this long after it is
                            issued (default 900: Slack's 15 minutes)

Web API: /api/<method>, GET or POST, query string, form or JSON body. The token comes from
`Authorization: Bearer` or a form body's `token` (not_authed without one). Kept and answered as
Slack does: chat.postMessage (a user id as channel posts in the DM "D"+user), chat.update,
chat.delete, chat.postEphemeral, reactions.add/.remove, conversations.history/.replies
(newest first / parent first, oldest/latest/inclusive/limit/cursor/include_all_metadata),
conversations.open/.info, users.info, bots.info, auth.test, views.open/.push (a trigger_id
`<epoch ms>.…`, as `slack-once sign` mints one per request, opens one view within 3 s:
expired_trigger_id after, exchanged_trigger_id the second time; an external_id names one view:
duplicate_external_id), views.update (by view_id or external_id); any other
method answers ok. Streams: chat.startStream (channel, thread_ts, markdown_text?) is a message of
the app in the thread, without metadata (outside a DM missing_recipient_team_id /
missing_recipient_user_id without them; user_not_found for a recipient_team_id of another
workspace, as for a Slack Connect author); chat.appendStream adds markdown_text; chat.stopStream
adds its final markdown_text, blocks and metadata and ends it; after the end or the expiry both
answer message_not_in_streaming_state. A stream's `chunks` show as Slack shows them: markdown_text
extends its text, plan_update titles its plan, task_update adds a task or changes it in place by id
(a status other than pending/in_progress/complete/error: invalid_chunks), blocks adds blocks;
chat.update replaces what it shows. assistant.threads.setStatus / setSuggestedPrompts / setTitle
answer ok (channel_id and thread_ts required; setSuggestedPrompts also without a thread: the agent
view's Messages tab) and are kept in /_standin/state. Agent sessions, one per (channel, thread_ts):
agents.sessions.setStatus (processing, active, suspended, closed; a title when it creates one),
agents.sessions.rename (session_not_found for none); a stream's start makes it processing, its
stop its session_status (active by default); kept in /_standin/state as sessions.

Response URLs (no token: the URL is the credential), as `slack-once sign` and the samples in
tests/data/ name them: POST /commands/<team>/<channel>/<id> and
/actions/<team>/<channel>/<message ts>/<id>, JSON {text|blocks, response_type, thread_ts,
replace_original, delete_original, metadata}: 5 posts each within 30 minutes (then 404
used_url / expired_url; answers are text, as Slack's: `ok` or the error's code); `in_channel` is a message of the app in <channel>, `ephemeral` is kept
with the ephemerals, replace/delete change the message <message ts>.

Endpoints for scripts (JSON bodies):
  POST /_standin/messages {channel, ts?, user?, text, thread_ts?}  a person's message
  POST /_standin/foreign  {channel, text, thread_ts?, metadata?, app_id?, bot_id?, user?}
                          a message of ANOTHER app (default A0999OTHER / B0999OTHER)
  POST /_standin/chatter  {channel, thread_ts?, count}  count people's messages, newest of all
  POST /_standin/script   {method, behaviours: ["ok" | "hang" | "post_then_hang" | "fail:CODE", …]}
                          the next calls of a Web API method (or "response_url") behave so: hang
                          never answers (and changes nothing), post_then_hang applies the call and
                          never answers, fail:CODE answers ok:false with CODE; then, normally
  GET  /_standin/state    {messages (by channel, oldest first), ephemerals, reactions, calls}
  POST /_standin/grant    {team, team_name?, enterprise?, enterprise_name?, is_enterprise_install?,
                          scope? ("chat:write,commands"), user_id? ("U0INSTALLER"), user_scope? (""),
                          rotation? (false), bot_user? ("U"+team suffix+"BOT"), expires_in? (43200),
                          redirect_uri?}  a person approved the install in a browser: {ok, code}, a code
                          that works once within 10 minutes (OAuth only: else oauth_not_configured)
  POST /_standin/revoke   {token} or {team}  a person removed the app: that token, or all of a team's,
                          is revoked (token_revoked / invalid_refresh_token from then on)
  POST /_standin/stop     {channel, thread_ts, user?}  a person pressed the stop button of that
                          agent session: the app's streams in the thread stop (appends answer
                          stopped_by_user, stops message_not_in_streaming_state); answers
                          {ok, event}: the agent_session_stopped event to deliver
  POST /_standin/execution {callback_id, inputs? ({}), team? (--team)}  a workflow reached the app's
                          custom step (Workflow Builder): {ok, function_execution_id ("Fx…"),
                          workflow_execution_id ("Wx…"), bot_access_token ("xwfp-…")}; it is running
  POST /_standin/execution/token {function_execution_id}  {ok, bot_access_token}: a new token of that
                          execution, as each interactive payload of the step carries one (born revoked
                          when the execution no longer runs); unknown: function_execution_not_found
  POST /_standin/execution/end {function_execution_id}  the workflow was stopped / the step timed out:
                          a running execution is ended; all its tokens are revoked
  State also: executions [{function_execution_id, workflow_execution_id, callback_id, team, inputs,
  state (running|completed|failed|ended), outputs, error, completions (completeSuccess/completeError
  answered ok), refused (answered not ok; a scripted fail:CODE is not counted), refusals (their
  codes, in order)}], oldest first.
  State with OAuth also: oauth_exchanges [{grant_type, team, ok, error?}], issued_tokens (access
  tokens issued, by team), live_tokens (usable now, by team), installations, teams (each other team's
  messages and reactions). /_standin/messages, /foreign, /chatter take an optional team.
Each call is printed on one line (method, whether a bearer token came, arguments); never a token,
code or secret (they show as ***); the same arguments are kept in calls.

OAuth (with --client-id): oauth.v2.access (form or query; client_id/client_secret in the body or as
HTTP Basic) answers invalid_client_id / bad_client_secret for other credentials. With a code:
invalid_code when unknown, used or older than 10 minutes, bad_redirect_uri when the grant named
another; else Slack's answer: access_token (xoxb-), token_type bot, scope, bot_user_id, app_id, team
{id, name} (null for an enterprise install), enterprise {id, name} or null, is_enterprise_install,
authed_user {id, and with a user_scope: scope, access_token (xoxp-), token_type user}; with rotation
also refresh_token (xoxe-1-) and expires_in, at the top and in authed_user. grant_type=refresh_token
with refresh_token R: a new pair (access + refresh, expires_in), and the pair issued from R before is
superseded (so of two exchanges of R both answered, only the later pair works: the earlier access
token answers invalid_auth, its refresh token invalid_refresh_token); once a token issued from R is
used (a Web API call, or its own exchange), R is dead: invalid_refresh_token, as for a revoked or
unknown one. A reinstall (a new code for the team) issues new tokens; older ones keep working.
Tokens: an issued token acts in its installation (team, bot user, bot id "B"+team suffix; the
default team keeps --bot-id and --bot-user): auth.test answers its team_id, team, user_id, bot_id,
app_id, is_enterprise_install (enterprise_id), posts carry its bot_id, app_id, bot_profile and bot
user, and each team's conversations, reactions and views are its own. A revoked one answers
token_revoked, one past expires_in token_expired, a superseded or refresh token invalid_auth;
auth.revoke revokes the calling one. A user token (xoxp-) acts in its team as its person
(auth.test, chat.postMessage). Tokens it did not issue follow --token's rule above, in the default
team (so give --token for any other token to answer invalid_auth). Response URLs act in their team
when it is installed, else in the default one.

Workflow steps: a workflow token (xwfp-) acts as the app's bot in its execution's team, as a bot
token of that team does (posts carry its bot_id, app_id, bot user; auth.test its identity). Older
than --workflow-token-seconds: token_expired; its execution no longer running (or the token revoked):
token_revoked; not issued here: invalid_auth. functions.completeSuccess {function_execution_id,
outputs (an object; JSON text in a form)} and functions.completeError {function_execution_id, error
(non-empty text)} check, in order: not_authed, token_expired (a workflow token), the token's usual
refusals (another kind of token), function_execution_not_found, access_denied (not a token of this
execution: a bot or user token, another execution's), execution_not_in_running_state (completed,
failed or ended; a token revoked by that end is still this execution's), invalid_arguments; then the
execution is completed (outputs) or failed (error), all its tokens revoked: {ok}.

Lenient where Slack's behaviour is unknown: posting to an unseen channel id creates it; a reply
to a reply joins its thread; blocks are derived from text; replies' parent counts in the limit.
"""
import argparse
import base64
import json
import math
import secrets
import string
import threading
import time
import traceback
import urllib.parse
import uuid
from collections import deque
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPT = None
LOCK = threading.Lock()
channels = {}      # channel id -> {ts: message as Slack keeps it}
ephemerals = []
reactions = {}     # (channel, ts) -> {name: [user ids]}
calls = []
recent = {}        # method -> deque of monotonic call times, for --history-per-minute
hooks = {}         # response URL path -> [uses, first use (monotonic)]
triggers = set()   # trigger ids spent
views = {}         # view id -> the view as Slack shows it
assistant = []     # assistant.threads.* calls: {method, channel_id, thread_ts, args}
sessions = {}      # (channel, thread_ts) -> {status, title, statuses, titles, stopped_after?}: agent sessions
task_updates = {}  # "channel ts task" -> the statuses a stream showed for the task, in order
scripts = {}       # method -> deque of scripted behaviours (POST /_standin/script)
last_us = 0        # the newest ts handed out or stored, in microseconds

# OAuth (--client-id/--client-secret). Never printed: tokens, codes, the secret.
installs = {}      # team id -> Install (the default team's is DEFAULT, made in main)
codes = {}         # authorization code -> {"grant": body of /_standin/grant, "made": monotonic, "used"}
tokens = {}        # token -> {"kind": bot|user|refresh, "team", "user"?, "state": live|revoked|superseded,
                   #           "expires": monotonic or None, "parent": the refresh token it came from,
                   #           refresh tokens also "for": bot|user, "issued": [(access, refresh)], "dead"}
exchanges = []     # oauth.v2.access answered: {grant_type, team, ok, error?}
issued = {}        # team id -> access tokens issued
view_team = {}     # view id -> the team whose view it is
SECRET_ARGS = ("client_secret", "code", "refresh_token", "token", "bot_access_token")

# Workflow Builder custom steps. Never printed: workflow tokens.
executions = {}     # function execution id -> {function_execution_id, workflow_execution_id, callback_id,
                    #   team, inputs, state: running|completed|failed|ended, outputs, error, completions, refused}
workflow_tokens = {}  # xwfp- token -> {"kind": "workflow", "execution", "team", "user": None,
                      #                 "state": live|revoked, "made": monotonic}
COMPLETE = ("functions.completeSuccess", "functions.completeError")


class Install:
    """A workspace and the app's installation in it: the identity its bot token carries and
    its conversations (each team's are its own)."""

    def __init__(self, team, app_id, bot_id, bot_user, bot_name, team_name, channels=None, reactions=None):
        self.team, self.app_id, self.bot_id, self.bot_user, self.bot_name = team, app_id, bot_id, bot_user, bot_name
        self.team_name, self.enterprise, self.enterprise_name, self.is_enterprise_install = team_name, None, None, False
        self.scope, self.user_scope, self.user_id, self.rotation, self.expires_in = "", "", None, False, 43200
        self.channels = {} if channels is None else channels
        self.reactions = {} if reactions is None else reactions


DEFAULT = CUR = None  # the default workspace (--team …); the one the call at hand acts in
USER = None           # the user of the user token (xoxp-) the call at hand came with
TOKEN = None          # the record of the issued token the call at hand came with (None: --token's rule)


def other_team():  # what kept things of a workspace other than the default one add
    return {} if CUR is DEFAULT else {"team": CUR.team}


def workspace(team):
    """A team's workspace (made on first mention, not installed until an oauth.v2.access)."""
    team = str(team)
    if team not in installs:
        suffix = team[1:] if team[:1] == "T" else team
        installs[team] = Install(team, OPT.app_id, "B" + suffix, "U" + suffix + "BOT", OPT.bot_name,
                                 f"Team {team}")
    return installs[team]


class Fail(Exception):
    def __init__(self, error, status=200, headers=None):
        super().__init__(error)
        self.error, self.status, self.headers = error, status, headers or {}


def micros(ts, error="invalid_ts"):
    try:
        return int(Decimal(str(ts)) * 1_000_000)
    except (InvalidOperation, ValueError):
        raise Fail(error)


def ts_text(us):
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def now_us():  # the stand-in's clock never runs behind its newest message
    return max(time.time_ns() // 1000, last_us)


def new_ts():  # strictly increasing "<epoch s>.<6 digits>" from the clock
    global last_us
    last_us = max(time.time_ns() // 1000, last_us + 1)
    return ts_text(last_us)


def flag(args, key):
    return str(args.get(key, "")).lower() in ("true", "1")


def json_arg(args, key, error):  # JSON bodies carry objects, forms carry them as JSON text
    value = args.get(key)
    if isinstance(value, str) and value:
        try:
            value = json.loads(value)
        except ValueError:
            raise Fail(error)
    return value or None


def rich_text(text):  # the blocks Slack derives from a message's text
    return [{"type": "rich_text", "block_id": "standin", "elements": [
        {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}]}]


def conversation(channel, create=False):
    if not channel:
        raise Fail("channel_not_found")
    channel = str(channel)
    if create and channel[0] in "UW":  # posting to a user id: the DM between that user and the bot
        channel = "D" + channel
    if channel not in CUR.channels:
        if not create:
            raise Fail("channel_not_found")
        CUR.channels[channel] = {}
    return channel


def store(channel, message):
    global last_us
    msgs = CUR.channels.setdefault(channel, {})
    if message["ts"] in msgs:
        raise Fail("ts_taken", 409)
    thread = message.get("thread_ts")
    if thread and thread in msgs and msgs[thread].get("thread_ts", thread) != thread:
        thread = message["thread_ts"] = msgs[thread]["thread_ts"]  # a reply's ts: its thread
    if thread and thread in msgs:
        message["parent_user_id"] = msgs[thread].get("user")
    last_us = max(last_us, micros(message["ts"]))
    msgs[message["ts"]] = message
    return message


def person(channel, text, user=None, ts=None, thread_ts=None):
    message = {"type": "message", "user": user or "U0123USER", "text": text or "",
               "ts": ts_text(micros(ts)) if ts else new_ts(), "team": CUR.team,
               "client_msg_id": str(uuid.uuid4()), "blocks": rich_text(text or "")}
    if thread_ts:
        message["thread_ts"] = ts_text(micros(thread_ts, "invalid_thread_ts"))
    channel = conversation(channel, create=True)
    return channel, store(channel, message)


def metadata_arg(args):  # {event_type, event_payload}: an object, or JSON text in a form
    metadata = json_arg(args, "metadata", "invalid_metadata_format")
    if metadata is None:
        return None
    if not (isinstance(metadata, dict) and isinstance(metadata.get("event_type"), str)
            and isinstance(metadata.get("event_payload", {}), dict)):
        raise Fail("invalid_metadata_schema")
    return {"event_type": metadata["event_type"], "event_payload": metadata.get("event_payload", {})}


def bot_post(channel, args, app_id, bot_id, user, name):
    text, blocks = args.get("text") or "", json_arg(args, "blocks", "invalid_blocks_format")
    metadata = metadata_arg(args)
    if not (text or blocks or args.get("attachments")):
        raise Fail("no_text")
    thread = micros(args["thread_ts"], "invalid_thread_ts") if args.get("thread_ts") else None
    if thread is not None and thread <= 0:
        raise Fail("invalid_thread_ts")
    message = {"user": user, "type": "message", "ts": new_ts(), "bot_id": bot_id,
               "app_id": app_id, "text": text, "team": CUR.team,
               "bot_profile": {"id": bot_id, "app_id": app_id, "name": name, "deleted": False,
                               "updated": int(time.time()), "team_id": CUR.team}}
    if blocks:
        message["blocks"] = blocks
    if thread:  # an unknown thread_ts is accepted (ok), and the reply then shows nowhere
        message["thread_ts"] = ts_text(thread)
        if flag(args, "reply_broadcast"):
            message["subtype"] = "thread_broadcast"
    if metadata is not None:
        message["metadata"] = metadata
    return store(channel, message)


def shown(channel, message, with_metadata=True):
    """A message as Slack shows it: thread summary and reactions added, metadata on request."""
    m = dict(message)
    if not m.get("blocks") and "bot_id" in m:
        m["blocks"] = rich_text(m.get("text", ""))
    if not with_metadata:
        m.pop("metadata", None)
    replies = [r for r in CUR.channels[channel].values()
               if r.get("thread_ts") == m["ts"] and r["ts"] != m["ts"]]
    if replies:
        users = list(dict.fromkeys(r.get("user") for r in replies))
        m.update(thread_ts=m["ts"], reply_count=len(replies), reply_users_count=len(users),
                 reply_users=users, latest_reply=max(r["ts"] for r in replies))
    found = CUR.reactions.get((channel, m["ts"]))
    if found:
        m["reactions"] = [{"name": n, "users": u, "count": len(u)} for n, u in found.items()]
    return m


def check_rate(method):
    if not OPT.history_per_minute:
        return
    times, now = recent.setdefault(method, deque()), time.monotonic()
    while times and now - times[0] >= 60:
        times.popleft()
    if len(times) >= OPT.history_per_minute:
        wait = max(1, math.ceil(60 - (now - times[0])))
        raise Fail("ratelimited", 429, {"Retry-After": str(wait)})
    times.append(now)


def window(args, default_limit):
    """oldest, latest (µs), whether bounds are inclusive, the page size, the cursor (µs)."""
    lo = micros(args.get("oldest") or 0, "invalid_ts_oldest")
    hi = micros(args["latest"], "invalid_ts_latest") if args.get("latest") else now_us()
    try:
        limit = int(args.get("limit") or default_limit)
    except ValueError:
        raise Fail("invalid_limit")
    limit = min(limit if limit > 0 else default_limit, OPT.page_cap)
    cursor = None
    if args.get("cursor"):
        try:
            kind, _, value = base64.b64decode(args["cursor"], validate=True).decode().partition(":")
            cursor = int(value)
        except ValueError:
            raise Fail("invalid_cursor")
        if kind != "next_ts":
            raise Fail("invalid_cursor")
    inclusive = flag(args, "inclusive")
    return lo, hi, inclusive, limit, cursor


def within(ts, lo, hi, inclusive, cursor=None):
    t = micros(ts)
    if cursor is not None and t > cursor:
        return False
    return (lo < t or (inclusive and t == lo)) and (t < hi or (inclusive and t == hi)
                                                    or (cursor is not None and t == cursor))


def page(answer, channel, selected, limit, meta):
    answer.update(messages=[shown(channel, m, meta) for m in selected[:limit]],
                  has_more=len(selected) > limit)
    if len(selected) > limit:  # Slack's cursors are base64 of "next_ts:<the next page's first>"
        nxt = selected[limit]["ts"].replace(".", "")
        answer["response_metadata"] = {"next_cursor": base64.b64encode(f"next_ts:{nxt}".encode()).decode()}
    return answer


def history(args):
    channel = conversation(args.get("channel"))
    lo, hi, inclusive, limit, cursor = window(args, 100)
    meta = flag(args, "include_all_metadata")
    # Top-level messages (and broadcast replies); a cursor continues with older ones, from its own on.
    selected = [m for m in CUR.channels[channel].values()
                if (m.get("thread_ts", m["ts"]) == m["ts"] or m.get("subtype") == "thread_broadcast")
                and within(m["ts"], lo, hi, inclusive, cursor)]
    selected.sort(key=lambda m: micros(m["ts"]), reverse=True)
    return page({"ok": True, "pin_count": 0}, channel, selected, limit, meta)


def replies(args):
    channel = conversation(args.get("channel"))
    msgs = CUR.channels[channel]
    if str(args.get("ts")) not in msgs:
        raise Fail("thread_not_found")
    root = msgs[str(args["ts"])].get("thread_ts", str(args["ts"]))
    if root not in msgs:
        raise Fail("thread_not_found")
    lo, hi, inclusive, limit, cursor = window(args, 1000)
    meta = flag(args, "include_all_metadata")
    later = [m for m in msgs.values()
             if m.get("thread_ts") == root and m["ts"] != root and within(m["ts"], lo, hi, inclusive)]
    later.sort(key=lambda m: micros(m["ts"]))
    if cursor is not None:  # continue with newer replies, from the cursor's one on
        return page({"ok": True}, channel, [m for m in later if micros(m["ts"]) >= cursor], limit, meta)
    # The parent comes first on the first page, whatever the bounds, and counts in the limit.
    return page({"ok": True}, channel, [msgs[root]] + later, limit, meta)


TASK_STATUSES = ("pending", "in_progress", "complete", "error")


def chunks_arg(args):  # a stream's chunks: JSON, or JSON text in a form; None when absent
    chunks = json_arg(args, "chunks", "invalid_chunks")
    if chunks is None:
        return None
    def valid(c):
        kind = c.get("type") if isinstance(c, dict) else None
        if kind == "markdown_text":
            return isinstance(c.get("text"), str)
        if kind == "plan_update":
            return isinstance(c.get("title"), str)
        if kind == "task_update":
            return bool(c.get("id")) and isinstance(c.get("title"), str) and c.get("status") in TASK_STATUSES
        if kind == "blocks":
            return isinstance(c.get("blocks"), list)
        return False
    if not isinstance(chunks, list) or not all(valid(c) for c in chunks):
        raise Fail("invalid_chunks")
    return chunks


def apply_chunks(channel, m, chunks):
    for c in chunks or []:
        if c["type"] == "markdown_text":
            m["text"] = m.get("text", "") + c["text"]
        elif c["type"] == "plan_update":
            m.setdefault("plan", {"tasks": []})["title"] = c["title"]
        elif c["type"] == "task_update":
            tasks = m.setdefault("plan", {"tasks": []})["tasks"]
            known = next((t for t in tasks if t["id"] == c["id"]), None)
            if known is None:
                tasks.append(dict(c))
            else:
                known.update(c)
            task_updates.setdefault(f"{channel} {m['ts']} {c['id']}", []).append(c["status"])
        elif c["type"] == "blocks":
            m.setdefault("stream_blocks", []).extend(c["blocks"])


def set_session(channel, thread, status=None, title=None, rename=False):
    key = (channel, thread or "")
    new = key not in sessions
    s = sessions.setdefault(key, {"channel": channel, "thread_ts": thread or "", "status": None,
                                  "title": None, "statuses": [], "titles": []})
    if title and (new or rename):
        s["title"] = title
        s["titles"].append(title)
    if status:
        s["status"] = status
        s["statuses"].append(status)


def stop_session(body):
    """POST /_standin/stop: a person pressed the stop button of a session."""
    channel, thread = conversation(body.get("channel")), str(body.get("thread_ts") or "")
    stopped = []
    for m in CUR.channels[channel].values():
        if m.get("app_id") == CUR.app_id and m.get("thread_ts") == thread and m.get("streaming"):
            m["streaming"], m["stopped_by_user"] = False, True
            stopped.append(m["ts"])
    ts = new_ts()
    for m in CUR.channels[channel].values():
        if m.get("stopped_by_user") and "stopped_at" not in m:
            m["stopped_at"], m["stopped_text"], m["stopped_blocks"] = ts, m.get("text"), m.get("blocks")
    if (channel, thread) in sessions:
        sessions[(channel, thread)]["stopped_after"] = len(sessions[(channel, thread)]["statuses"])
    return {"ok": True, "event": {"type": "agent_session_stopped", "channel": channel,
                                  "user": body.get("user") or "U0123USER", "thread_ts": thread,
                                  "streaming_message_ts": stopped, "event_ts": ts}}


def own_message(args, refusal):
    channel = conversation(args.get("channel"))
    message = CUR.channels[channel].get(str(args.get("ts")))
    if message is None or message.get("subtype") == "tombstone":
        raise Fail("message_not_found")
    if message.get("bot_id") != CUR.bot_id:
        raise Fail(refusal)
    return channel, message


def web_api(method, args):
    if method in COMPLETE:
        return complete(method, args)
    if method == "chat.postMessage" and USER:  # a user token posts as its person
        if not (args.get("text") or args.get("blocks")):
            raise Fail("no_text")
        channel, m = person(args.get("channel"), args.get("text"), USER, thread_ts=args.get("thread_ts"))
        return {"ok": True, "channel": channel, "ts": m["ts"], "message": shown(channel, m)}
    if method == "chat.postMessage":
        channel = conversation(args.get("channel"), create=True)
        m = bot_post(channel, args, CUR.app_id, CUR.bot_id, CUR.bot_user, CUR.bot_name)
        return {"ok": True, "channel": channel, "ts": m["ts"], "message": shown(channel, m)}
    if method == "chat.update":
        channel, m = own_message(args, "cant_update_message")
        text, blocks = args.get("text"), json_arg(args, "blocks", "invalid_blocks_format")
        if not (text or blocks or args.get("attachments")):
            raise Fail("no_text")
        if text is not None:
            m["text"] = text
        if blocks is not None or "blocks" in args:  # absent: kept; an empty array removes them
            m["blocks"] = blocks or []
        metadata = metadata_arg(args)
        if metadata is not None:
            m["metadata"] = metadata
        m["edited"] = {"user": CUR.bot_user, "ts": new_ts()}
        m.pop("streaming", None)
        m.pop("plan", None)  # what the stream showed beside its text is replaced too
        m.pop("stream_blocks", None)
        return {"ok": True, "channel": channel, "ts": m["ts"], "text": m["text"],
                "message": shown(channel, m)}
    if method == "chat.delete":
        channel, m = own_message(args, "cant_delete_message")
        if any(r.get("thread_ts") == m["ts"] and r["ts"] != m["ts"] for r in CUR.channels[channel].values()):
            CUR.channels[channel][m["ts"]] = {"type": "message", "subtype": "tombstone", "hidden": True,
                                          "text": "This message was deleted.", "user": "USLACKBOT",
                                          "ts": m["ts"]}
        else:
            del CUR.channels[channel][m["ts"]]
        CUR.reactions.pop((channel, m["ts"]), None)
        return {"ok": True, "channel": channel, "ts": m["ts"]}
    if method in ("reactions.add", "reactions.remove"):
        channel = conversation(args.get("channel"))
        ts, name = str(args.get("timestamp")), str(args.get("name", "")).strip(":")
        if ts not in CUR.channels[channel]:
            raise Fail("message_not_found")
        users = CUR.reactions.setdefault((channel, ts), {}).setdefault(name, [])
        if method == "reactions.add":
            if CUR.bot_user in users:
                raise Fail("already_reacted")
            users.append(CUR.bot_user)
        else:
            if CUR.bot_user not in users:
                raise Fail("no_reaction")
            users.remove(CUR.bot_user)
        CUR.reactions[(channel, ts)] = {n: u for n, u in CUR.reactions[(channel, ts)].items() if u}
        return {"ok": True}
    if method == "chat.postEphemeral":
        channel = conversation(args.get("channel"), create=True)
        if not args.get("user"):
            raise Fail("user_not_in_channel")
        ts = new_ts()
        ephemerals.append({"channel": channel, "user": args["user"], "message_ts": ts,
                           "text": args.get("text"), "blocks": json_arg(args, "blocks", "invalid_blocks_format"),
                           **other_team()})
        return {"ok": True, "message_ts": ts}
    if method in ("conversations.history", "conversations.replies"):
        check_rate(method)
        return history(args) if method == "conversations.history" else replies(args)
    if method == "conversations.open":
        users = str(args.get("users") or "").replace(" ", "")
        if not users and not args.get("channel"):
            raise Fail("users_list_not_supplied")
        channel = str(args.get("channel") or "D" + users.replace(",", ""))
        known = channel in CUR.channels
        CUR.channels.setdefault(channel, {})
        return {"ok": True, "channel": {"id": channel}, **({"no_op": True, "already_open": True} if known else {})}
    if method == "conversations.info":
        channel = conversation(args.get("channel"))
        info = {"id": channel, "is_channel": channel[0] == "C", "is_private": channel[0] == "G",
                "is_im": channel[0] == "D", "is_member": True, "created": 1700000000}
        info.update({"user": channel[1:]} if channel[0] == "D" else {"name": channel.lower()})
        return {"ok": True, "channel": info}
    if method == "users.info":
        user = str(args.get("user") or "")
        if user[:1] not in ("U", "W"):
            raise Fail("user_not_found")
        bot = user == CUR.bot_user
        name = CUR.bot_name if bot else user.lower()
        profile = {"real_name": name, "display_name": name, **({"bot_id": CUR.bot_id} if bot else {})}
        return {"ok": True, "user": {"id": user, "team_id": CUR.team, "name": name, "real_name": name,
                                     "deleted": False, "is_bot": bot, "profile": profile}}
    if method == "bots.info":
        if args.get("bot") != CUR.bot_id:
            raise Fail("bot_not_found")
        return {"ok": True, "bot": {"id": CUR.bot_id, "deleted": False, "name": CUR.bot_name,
                                    "app_id": CUR.app_id, "user_id": CUR.bot_user, "updated": 1700000000}}
    if method == "chat.startStream":
        channel = conversation(args.get("channel"), create=True)
        if not args.get("thread_ts"):
            raise Fail("invalid_arguments")
        if not channel.startswith("D"):  # outside a DM Slack asks whom the stream is for
            if not args.get("recipient_team_id"):
                raise Fail("missing_recipient_team_id")
            if not args.get("recipient_user_id"):
                raise Fail("missing_recipient_user_id")
        if args.get("recipient_team_id") and args["recipient_team_id"] != CUR.team:
            raise Fail("user_not_found")  # a Slack Connect author of another organisation
        chunks = chunks_arg(args)
        message = {"user": CUR.bot_user, "type": "message", "ts": new_ts(), "bot_id": CUR.bot_id,
                   "app_id": CUR.app_id, "text": str(args.get("markdown_text") or ""), "team": CUR.team,
                   "thread_ts": str(args["thread_ts"]), "streaming": True, "stream_started": time.monotonic(),
                   "bot_profile": {"id": CUR.bot_id, "app_id": CUR.app_id, "name": CUR.bot_name,
                                   "deleted": False, "updated": int(time.time()), "team_id": CUR.team}}
        if args.get("task_display_mode"):
            message["task_display_mode"] = str(args["task_display_mode"])
        apply_chunks(channel, message, chunks)
        store(channel, message)
        set_session(channel, str(args["thread_ts"]), "processing")  # a stream makes its session processing
        return {"ok": True, "channel": channel, "ts": message["ts"]}
    if method in ("chat.appendStream", "chat.stopStream"):
        channel, m = own_message(args, "cant_update_message")
        if m.get("stopped_by_user") and method == "chat.appendStream":
            raise Fail("stopped_by_user")
        if not m.get("streaming") or time.monotonic() - m.get("stream_started", 0) > OPT.stream_expiry:
            m["streaming"] = False
            raise Fail("message_not_in_streaming_state")
        chunks = chunks_arg(args)
        m["text"] = m.get("text", "") + str(args.get("markdown_text") or "")
        apply_chunks(channel, m, chunks)
        if method == "chat.stopStream":
            m["streaming"] = False
            blocks = json_arg(args, "blocks", "invalid_blocks_format")
            if blocks:
                m["blocks"] = blocks
            metadata = metadata_arg(args)
            if metadata is not None:
                m["metadata"] = metadata
            set_session(channel, m.get("thread_ts"), str(args.get("session_status") or "active"))
        return {"ok": True, "channel": channel, "ts": m["ts"]}
    if method in ("agents.sessions.setStatus", "agents.sessions.rename"):
        channel, thread = str(args.get("channel_id") or ""), str(args.get("thread_ts") or "")
        if not channel:
            raise Fail("invalid_arguments")
        if method == "agents.sessions.rename":
            title = str(args.get("title") or "")
            if not title or len(title) > 200:
                raise Fail("invalid_arguments")
            if (channel, thread) not in sessions:
                raise Fail("session_not_found")
            set_session(channel, thread, title=title, rename=True)
            return {"ok": True, "title": title}
        status = str(args.get("status") or "")
        if status not in ("processing", "active", "suspended", "closed"):
            raise Fail("invalid_arguments")
        set_session(channel, thread, status, str(args.get("title") or "") or None)
        return {"ok": True, "status": status, "agent_status": status}
    if method in ("assistant.threads.setStatus", "assistant.threads.setSuggestedPrompts",
                  "assistant.threads.setTitle"):
        threadless = method == "assistant.threads.setSuggestedPrompts"  # the Messages tab's
        if not (args.get("channel_id") and (args.get("thread_ts") or threadless)):
            raise Fail("invalid_arguments")
        assistant.append({"method": method, "channel_id": args["channel_id"],
                          "thread_ts": args.get("thread_ts") or "", "args": args, **other_team()})
        return {"ok": True}
    if method in ("views.open", "views.push"):
        trigger = str(args.get("trigger_id") or "")
        try:
            minted = int(trigger.split(".")[0]) / 1000
        except ValueError:
            raise Fail("invalid_trigger_id")
        if trigger in triggers:
            raise Fail("exchanged_trigger_id")
        if time.time() - minted > 3:
            raise Fail("expired_trigger_id")
        view = json_arg(args, "view", "invalid_arguments")
        if not isinstance(view, dict):
            raise Fail("invalid_arguments")
        # An external_id names one view of the app in the workspace.
        if view.get("external_id") and any(v.get("external_id") == view["external_id"]
                                           for i, v in views.items() if view_team.get(i) == CUR.team):
            raise Fail("duplicate_external_id")
        triggers.add(trigger)
        view = {**view, "id": f"V{len(views) + 1:010d}", "hash": f"{time.time():.6f}.hash",
                "app_id": CUR.app_id, "team_id": CUR.team}
        views[view["id"]] = view
        view_team[view["id"]] = CUR.team
        return {"ok": True, "view": view}
    if method == "views.update":
        # By its id, or by the external_id the app gave it.
        view_id = args.get("view_id")
        if not view_id and args.get("external_id"):
            view_id = next((i for i, v in views.items() if view_team.get(i) == CUR.team
                            and v.get("external_id") == args["external_id"]), None)
        if view_id not in views or view_team.get(view_id) != CUR.team:
            raise Fail("not_found")
        view = {**json_arg(args, "view", "invalid_arguments"), "id": view_id,
                "hash": f"{time.time():.6f}.hash"}
        if "external_id" not in view and views[view_id].get("external_id"):
            view["external_id"] = views[view_id]["external_id"]
        views[view_id] = view
        return {"ok": True, "view": view}
    if method == "auth.test" and TOKEN:  # a token the stand-in issued: its installation's identity
        url = (f"https://{CUR.enterprise.lower()}.enterprise.slack.com/" if CUR.is_enterprise_install
               else f"https://{CUR.team.lower()}.slack.com/")
        answer = {"ok": True, "url": url, "team": CUR.team_name,
                  "user": USER.lower() if USER else CUR.bot_name, "team_id": CUR.team,
                  "user_id": USER or CUR.bot_user, "app_id": CUR.app_id,
                  "is_enterprise_install": CUR.is_enterprise_install}
        if not USER:
            answer["bot_id"] = CUR.bot_id
        if CUR.enterprise:
            answer["enterprise_id"] = CUR.enterprise
        return answer
    if method == "auth.revoke" and TOKEN:  # the call's own token, as Slack's auth.revoke
        if not flag(args, "test"):
            TOKEN["state"] = "revoked"
        return {"ok": True, "revoked": not flag(args, "test")}
    if method == "auth.test":
        return {"ok": True, "url": "https://standin.slack.com/", "team": "Stand-in",
                "user": CUR.bot_name, "team_id": CUR.team, "user_id": CUR.bot_user,
                "bot_id": CUR.bot_id, "is_enterprise_install": False}
    return {"ok": True}


def complete(method, args):
    """functions.completeSuccess / .completeError: the step's outcome, by a token of its execution."""
    execution = executions.get(str(args.get("function_execution_id") or ""))
    if execution is None:
        raise Fail("function_execution_not_found")
    if not (TOKEN and TOKEN["kind"] == "workflow" and TOKEN["execution"] == execution["function_execution_id"]):
        raise Fail("access_denied")
    if execution["state"] != "running":
        raise Fail("execution_not_in_running_state")
    if method == "functions.completeSuccess":
        outputs = args.get("outputs")
        if isinstance(outputs, str):  # a form carries it as JSON text
            try:
                outputs = json.loads(outputs)
            except ValueError:
                raise Fail("invalid_arguments")
        if not isinstance(outputs, dict):
            raise Fail("invalid_arguments")
        execution.update(state="completed", outputs=outputs)
    else:
        error = args.get("error")
        if not isinstance(error, str) or not error:
            raise Fail("invalid_arguments")
        execution.update(state="failed", error=error)
    revoke_execution(execution)
    execution["completions"] += 1
    return {"ok": True}


def refused(url, args, error):
    """A completeSuccess/completeError answered not ok: counted on the execution it names."""
    if not url.path.startswith("/_standin/") and url.path.rstrip("/").rsplit("/", 1)[-1] in COMPLETE:
        execution = executions.get(str(args.get("function_execution_id") or ""))
        if execution is not None:
            execution["refused"] += 1
            execution["refusals"].append(error)


def workflow_token(execution):
    """A new token of the execution (born revoked when it no longer runs)."""
    token = f"xwfp-{random_text(13, string.digits)}-{random_text(13, string.digits)}-{random_text(32)}"
    workflow_tokens[token] = {"kind": "workflow", "execution": execution["function_execution_id"],
                              "team": execution["team"], "user": None, "made": time.monotonic(),
                              "state": "live" if execution["state"] == "running" else "revoked"}
    return token


def revoke_execution(execution):
    for record in workflow_tokens.values():
        if record["execution"] == execution["function_execution_id"]:
            record["state"] = "revoked"


def execution_id(prefix, taken):
    while True:
        made = prefix + random_text(10, string.ascii_uppercase + string.digits)
        if made not in taken:
            return made


def execution_endpoint(path, body):
    """POST /_standin/execution, /execution/token, /execution/end."""
    if path == "/_standin/execution":
        if not body.get("callback_id"):
            raise Fail("invalid_arguments")
        team = str(body.get("team") or OPT.team)
        workspace(team)  # made on first mention, as other teams are
        fid = execution_id("Fx", executions)
        execution = executions[fid] = {
            "function_execution_id": fid,
            "workflow_execution_id": execution_id("Wx", {e["workflow_execution_id"] for e in executions.values()}),
            "callback_id": body["callback_id"], "team": team,
            "inputs": {} if body.get("inputs") is None else body["inputs"], "state": "running",
            "outputs": None, "error": None, "completions": 0, "refused": 0, "refusals": []}
        return {"ok": True, "function_execution_id": fid,
                "workflow_execution_id": execution["workflow_execution_id"],
                "bot_access_token": workflow_token(execution)}
    execution = executions.get(str(body.get("function_execution_id") or ""))
    if execution is None:
        raise Fail("function_execution_not_found")
    if path == "/_standin/execution/token":
        return {"ok": True, "bot_access_token": workflow_token(execution)}
    if execution["state"] == "running":  # /end: stopped or timed out; a finished one keeps its state
        execution["state"] = "ended"
    revoke_execution(execution)
    return {"ok": True}


def respond(path, body):
    """A post to a response URL, as Slack answers it."""
    global CUR
    parts = path.strip("/").split("/")
    if len(parts) == 4 and parts[0] == "commands":
        channel, message_ts = parts[2], None
    elif len(parts) == 5 and parts[0] == "actions":
        channel, message_ts = parts[2], parts[3]
    else:
        raise Fail("invalid_url", 404)
    CUR = installs.get(parts[1], DEFAULT)  # an installed team's URL acts in it; any other, the default
    uses = hooks.setdefault(path, [0, time.monotonic()])
    if time.monotonic() - uses[1] > 1800:
        raise Fail("expired_url", 404)
    if uses[0] >= 5:
        raise Fail("used_url", 404)
    uses[0] += 1
    channel = conversation(channel, create=True)
    if body.get("delete_original") in (True, "true"):
        if message_ts in CUR.channels[channel]:
            del CUR.channels[channel][message_ts]
        return {"ok": True}
    if body.get("replace_original") in (True, "true"):
        m = CUR.channels[channel].get(str(message_ts))
        if m is None:
            raise Fail("message_not_found", 404)
        for key in ("text", "blocks", "attachments"):
            m[key] = body.get(key)
        return {"ok": True}
    if not (body.get("text") or body.get("blocks")):
        raise Fail("no_text", 400)
    if body.get("response_type") == "in_channel":
        bot_post(channel, body, CUR.app_id, CUR.bot_id, CUR.bot_user, CUR.bot_name)
    else:
        ephemerals.append({"channel": channel, "text": body.get("text"), "blocks": body.get("blocks"),
                           **other_team()})
    return {"ok": True}


def random_text(n, alphabet=string.ascii_letters + string.digits):
    return "".join(secrets.choice(alphabet) for _ in range(n))


def issue(inst, kind, parent=None, rotation=False):
    """A new access token of kind bot|user for inst, and with rotation its refresh token."""
    user = inst.user_id if kind == "user" else None
    access = f"{'xoxb' if kind == 'bot' else 'xoxp'}-{random_text(13, string.digits)}-" \
             f"{random_text(13, string.digits)}-{random_text(24)}"
    tokens[access] = {"kind": kind, "team": inst.team, "user": user, "state": "live", "parent": parent,
                      "expires": time.monotonic() + inst.expires_in if rotation else None}
    issued[inst.team] = issued.get(inst.team, 0) + 1
    if not rotation:
        return access, None
    refresh = f"xoxe-1-{random_text(120)}"
    tokens[refresh] = {"kind": "refresh", "for": kind, "team": inst.team, "user": user, "state": "live",
                       "parent": parent, "issued": [], "dead": False}
    return access, refresh


def used(record):
    """A token was used (an API call, a refresh exchange): the refresh token it came from dies."""
    if record.get("parent") in tokens:
        tokens[record["parent"]]["dead"] = True


def revoke(record, state="revoked"):
    if record["state"] == "live":
        record["state"] = state


def identity(inst):
    return {"team": None if inst.is_enterprise_install else {"id": inst.team, "name": inst.team_name},
            "enterprise": {"id": inst.enterprise, "name": inst.enterprise_name} if inst.enterprise else None,
            "is_enterprise_install": inst.is_enterprise_install}


def grant(body):
    """POST /_standin/grant: a person approved the install in a browser; the code to exchange."""
    if not OPT.client_id:
        raise Fail("oauth_not_configured", 400)
    if not isinstance(body.get("team"), str) or not body["team"]:
        raise Fail("invalid_arguments", 400)
    try:
        if int(body.get("expires_in", 43200)) <= 0:
            raise ValueError
    except (TypeError, ValueError):
        raise Fail("invalid_arguments", 400)
    code = f"{random_text(13, string.digits)}.{random_text(13, string.digits)}.{secrets.token_hex(32)}"
    codes[code] = {"grant": dict(body), "made": time.monotonic(), "used": False}
    return {"ok": True, "code": code}


def install(g):
    """The installation a code's grant makes (or makes anew: a reinstall keeps the bot)."""
    team = g["team"]
    inst = DEFAULT if team == OPT.team else workspace(team)
    installs[team] = inst
    if g.get("team_name"):
        inst.team_name = str(g["team_name"])
    if team != OPT.team and g.get("bot_user"):  # the default team keeps --bot-user and --bot-id
        inst.bot_user = str(g["bot_user"])
    inst.enterprise = g.get("enterprise") or None
    inst.enterprise_name = g.get("enterprise_name") or (f"Enterprise {inst.enterprise}" if inst.enterprise else None)
    inst.is_enterprise_install = bool(g.get("is_enterprise_install")) and bool(inst.enterprise)
    inst.scope = str(g.get("scope", "chat:write,commands"))
    inst.user_scope = str(g.get("user_scope") or "")
    inst.user_id = str(g.get("user_id") or "U0INSTALLER")
    inst.rotation = bool(g.get("rotation", False))
    inst.expires_in = int(g.get("expires_in", 43200))
    return inst


def oauth_access(args, basic):
    """oauth.v2.access, kept in oauth_exchanges."""
    record = {"grant_type": str(args.get("grant_type") or "authorization_code"), "team": None, "ok": False}
    exchanges.append(record)
    try:
        return exchange(args, basic, record)
    except Fail as fail:
        record["error"] = fail.error
        raise


def exchange(args, basic, record):
    """A code's exchange, or (grant_type=refresh_token) a refresh token's."""
    client_id, client_secret = basic or (args.get("client_id"), args.get("client_secret"))
    grant_type = record["grant_type"]
    if client_id != OPT.client_id:
        raise Fail("invalid_client_id")
    if not secrets.compare_digest(str(client_secret or ""), OPT.client_secret):
        raise Fail("bad_client_secret")
    if grant_type == "refresh_token":
        old = tokens.get(str(args.get("refresh_token") or ""))
        if old is None or old["kind"] != "refresh":
            raise Fail("invalid_refresh_token")
        record["team"] = old["team"]
        if old["state"] != "live" or old["dead"]:
            raise Fail("invalid_refresh_token")
        for pair in old["issued"]:  # the pair issued from it before: superseded
            for t in pair:
                revoke(tokens[t], "superseded")
        used(old)
        inst = installs[old["team"]]
        access, refresh = issue(inst, old["for"], parent=args["refresh_token"], rotation=True)
        old["issued"] = [(access, refresh)]
        answer = {"ok": True, "app_id": inst.app_id, "authed_user": {"id": old["user"] or inst.user_id},
                  "scope": inst.scope if old["for"] == "bot" else inst.user_scope,
                  "token_type": old["for"], "access_token": access}
        if old["for"] == "bot":
            answer["bot_user_id"] = inst.bot_user
        answer.update(refresh_token=refresh, expires_in=inst.expires_in, **identity(inst))
        record["ok"] = True
        return answer
    if grant_type != "authorization_code":
        raise Fail("invalid_grant_type")
    code = codes.get(str(args.get("code") or ""))
    if code is None:
        raise Fail("invalid_code")
    record["team"] = code["grant"]["team"]
    if code["used"] or time.monotonic() - code["made"] > 600:
        raise Fail("invalid_code")
    if code["grant"].get("redirect_uri") and args.get("redirect_uri") != code["grant"]["redirect_uri"]:
        raise Fail("bad_redirect_uri")
    code["used"] = True
    inst = install(code["grant"])
    answer = {"ok": True, "app_id": inst.app_id, "authed_user": {"id": inst.user_id}}
    if inst.scope:
        access, refresh = issue(inst, "bot", rotation=inst.rotation)
        answer.update(scope=inst.scope, token_type="bot", access_token=access, bot_user_id=inst.bot_user)
        if refresh:
            answer.update(refresh_token=refresh, expires_in=inst.expires_in)
    answer.update(identity(inst))
    if inst.user_scope:
        access, refresh = issue(inst, "user", rotation=inst.rotation)
        answer["authed_user"].update(scope=inst.user_scope, access_token=access, token_type="user")
        if refresh:
            answer["authed_user"].update(refresh_token=refresh, expires_in=inst.expires_in)
    record["ok"] = True
    return answer


def authenticate(token, method=None):
    """The workspace a Web API call acts in, by its token, as Slack checks it."""
    global CUR, USER, TOKEN
    if str(token).startswith("xwfp-"):  # a workflow token: the app's bot in its execution's team
        record = workflow_tokens.get(token)
        if record is None:
            raise Fail("invalid_auth")
        if time.monotonic() - record["made"] > OPT.workflow_token_seconds:
            raise Fail("token_expired")
        # Completing an execution answers for its state itself (execution_not_in_running_state).
        if method not in COMPLETE and (record["state"] != "live"
                                       or executions[record["execution"]]["state"] != "running"):
            raise Fail("token_revoked")
        CUR, USER, TOKEN = workspace(record["team"]), None, record
        return
    record = tokens.get(token)
    if record is None:  # not issued here: the single workspace's rule (--token, or any xoxb-)
        if not str(token).startswith("xoxb-") or (OPT.token and token != OPT.token):
            raise Fail("invalid_auth")
        return
    if record["kind"] == "refresh" or record["state"] == "superseded":
        raise Fail("invalid_auth")
    if record["state"] == "revoked":
        raise Fail("token_revoked")
    if record["expires"] is not None and time.monotonic() > record["expires"]:
        raise Fail("token_expired")
    used(record)
    CUR, USER, TOKEN = installs[record["team"]], record["user"], record


def revoke_endpoint(body):
    """POST /_standin/revoke {token} or {team}: a person removed the app (one token, or all of a team's)."""
    if body.get("team"):
        found = [r for r in tokens.values() if r["team"] == body["team"]]
    else:
        found = [tokens[body["token"]]] if body.get("token") in tokens else []
    if not found:
        raise Fail("token_not_found", 404)
    for r in found:
        revoke(r)
    return {"ok": True, "revoked": len(found)}


def oauth_state():
    live = {}
    for r in tokens.values():
        if r["kind"] != "refresh" and r["state"] == "live" and (r["expires"] is None or time.monotonic() <= r["expires"]):
            live[r["team"]] = live.get(r["team"], 0) + 1
    return {"oauth_exchanges": exchanges, "issued_tokens": issued, "live_tokens": live,
            "installations": [{"team": i.team, "team_name": i.team_name, "enterprise": i.enterprise,
                               "is_enterprise_install": i.is_enterprise_install, "bot_id": i.bot_id,
                               "bot_user": i.bot_user, "scope": i.scope, "user_scope": i.user_scope,
                               "rotation": i.rotation} for i in installs.values() if i.scope or i.user_scope],
            "teams": {t: {"messages": {c: list(m.values()) for c, m in i.channels.items()},
                          "reactions": [{"channel": c, "ts": ts, "name": n, "users": u}
                                        for (c, ts), r in i.reactions.items() for n, u in r.items()]}
                      for t, i in installs.items() if i is not DEFAULT}}


def standin(path, body):
    global CUR
    if body.get("team") and path in ("/_standin/messages", "/_standin/foreign", "/_standin/chatter"):
        CUR = DEFAULT if body["team"] == OPT.team else workspace(body["team"])
    if path == "/_standin/grant":
        return grant(body)
    if path == "/_standin/revoke":
        return revoke_endpoint(body)
    if path == "/_standin/stop":
        return stop_session(body)
    if path in ("/_standin/execution", "/_standin/execution/token", "/_standin/execution/end"):
        return execution_endpoint(path, body)
    if path == "/_standin/messages":
        channel, m = person(body.get("channel"), body.get("text"), body.get("user"), body.get("ts"),
                            body.get("thread_ts"))
        return {"ok": True, "channel": channel, "ts": m["ts"]}
    if path == "/_standin/foreign":
        channel = conversation(body.get("channel"), create=True)
        m = bot_post(channel, body, body.get("app_id") or "A0999OTHER",
                     body.get("bot_id") or "B0999OTHER", body.get("user") or "U0999OTHER", "other-app")
        return {"ok": True, "channel": channel, "ts": m["ts"]}
    if path == "/_standin/script":
        behaviours = body.get("behaviours") or []
        if not body.get("method") or not all(isinstance(b, str) for b in behaviours):
            raise Fail("invalid_arguments")
        scripts.setdefault(str(body["method"]), deque()).extend(behaviours)
        return {"ok": True}
    if path == "/_standin/chatter":
        people = ["U0123USER", "U0124USER", "U0125USER"]
        made = [person(body.get("channel"), f"chatter {i + 1}", people[i % 3],
                       thread_ts=body.get("thread_ts"))[1]["ts"] for i in range(int(body.get("count", 1)))]
        return {"ok": True, "ts": made}
    raise Fail("unknown_endpoint", 404)


class Handler(BaseHTTPRequestHandler):
    def handle_call(self):
        url = urllib.parse.urlparse(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        authorization = self.headers.get("Authorization", "")
        bearer = authorization[7:].strip() or None if authorization.startswith("Bearer ") else None
        scripted = None
        if not url.path.startswith("/_standin/"):
            method = ("response_url" if url.path.startswith(("/commands/", "/actions/"))
                      else url.path.rstrip("/").rsplit("/", 1)[-1])
            with LOCK:
                queue = scripts.get(method)
                scripted = queue.popleft() if queue else None
            if scripted == "hang":
                print(f"-- {method}: scripted to hang (not applied, never answered)", flush=True)
                time.sleep(3600)
                return
        with LOCK:
            if scripted and scripted.startswith("fail:"):
                code = scripted[5:] or "internal_error"
                status, headers, answer, shown_args = 200, {}, {"ok": False, "error": code}, {}
            else:
                status, headers, answer, shown_args = self.answer(url, raw, bearer)
            if url.path != "/_standin/state":
                method = (url.path[1:] if url.path.startswith("/_standin/")
                          else "response_url" if url.path.startswith(("/commands/", "/actions/"))
                          else url.path.rstrip("/").rsplit("/", 1)[-1])
                calls.append({"n": len(calls) + 1, "method": method, "bearer": bool(bearer),
                              "args": shown_args, "error": answer.get("error")})
                print(f"#{len(calls)} {method} (bearer token: {'yes' if bearer else 'NO'}): "
                      f"{json.dumps(shown_args, ensure_ascii=False)}"
                      + ("" if answer.get("ok") else f" -> {answer['error']}"), flush=True)
            hook = url.path.startswith(("/commands/", "/actions/"))
            # Response URLs answer as Slack's do: the text "ok", or the error's code as text.
            data = ("ok" if answer.get("ok") else answer.get("error", "")).encode() if hook \
                else json.dumps(answer).encode()
        if scripted == "post_then_hang":
            print("-- scripted to hang after applying the call", flush=True)
            time.sleep(3600)
            return
        self.send_response(status)
        for k, v in {"Content-Type": "text/plain" if hook else "application/json; charset=utf-8",
                     "Content-Length": str(len(data)), **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def answer(self, url, raw, bearer):
        """(HTTP status, headers, answer, the arguments as printed: without a token or secret)."""
        status, headers, answer, args = self.answer_with_secrets(url, raw, bearer)
        return status, headers, answer, {k: ("***" if k in SECRET_ARGS else v) for k, v in args.items()}

    def answer_with_secrets(self, url, raw, bearer):
        global CUR, USER, TOKEN
        CUR, USER, TOKEN = DEFAULT, None, None
        args = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        args.pop("token", None)  # a token in the query string is refused (since 2021)
        hook = url.path.startswith(("/commands/", "/actions/"))
        is_json = (self.headers.get("Content-Type", "").startswith("application/json")
                   or url.path.startswith("/_standin/") or hook)
        try:
            body = {}
            if is_json and raw:
                try:
                    body = json.loads(raw)
                except ValueError:
                    raise Fail("invalid_json")
                if not isinstance(body, dict):
                    raise Fail("invalid_json")
            elif raw:
                body = {k: v[0] for k, v in urllib.parse.parse_qs(raw.decode("utf-8", "replace")).items()}
            token = bearer or (None if is_json else body.get("token"))
            args.update({k: v for k, v in body.items() if k != "token"})
            if url.path == "/_standin/state":
                return 200, {}, {"ok": True, "messages": {c: list(m.values()) for c, m in channels.items()},
                                 "ephemerals": ephemerals, "calls": calls, "views": list(views.values()),
                                 "assistant": assistant, "executions": list(executions.values()),
                                 "sessions": list(sessions.values()), "task_updates": task_updates,
                                 "reactions": [{"channel": c, "ts": t, "name": n, "users": u}
                                               for (c, t), r in reactions.items() for n, u in r.items()],
                                 **(oauth_state() if OPT.client_id else {})}, {}
            if url.path.startswith("/_standin/"):
                return 200, {}, standin(url.path, body), args
            if hook:
                return 200, {}, respond(url.path, body), args
            method = url.path.rstrip("/").rsplit("/", 1)[-1]
            if method == "oauth.v2.access" and OPT.client_id:  # client credentials, not a token
                return 200, {}, oauth_access(args, self.basic_auth()), args
            if not token:
                raise Fail("not_authed")
            authenticate(token, method)
            answer = web_api(method, args)
            return 200, {"X-OAuth-Scopes": CUR.scope} if TOKEN and TOKEN["kind"] == "bot" else {}, answer, args
        except Fail as fail:
            refused(url, args, fail.error)
            return fail.status, fail.headers, {"ok": False, "error": fail.error}, args
        except Exception as error:  # a fault of the stand-in itself: say so, keep serving
            traceback.print_exc()
            refused(url, args, "standin_fault")
            return 500, {}, {"ok": False, "error": f"standin_fault: {error!r}"}, args

    def basic_auth(self):
        """HTTP Basic client credentials (client_id:client_secret), as oauth.v2.access takes them."""
        authorization = self.headers.get("Authorization", "")
        if not authorization.startswith("Basic "):
            return None
        try:
            client_id, _, client_secret = base64.b64decode(authorization[6:].strip()).decode().partition(":")
        except ValueError:
            raise Fail("invalid_client_id")
        return urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(client_secret)

    do_GET = do_POST = handle_call

    def log_message(self, *args):
        pass


def main():
    global OPT
    p = argparse.ArgumentParser(description="A stand-in for Slack's Web API on 127.0.0.1.")
    p.add_argument("port", nargs="?", type=int, default=4000)
    p.add_argument("--team", default="T0001TEAM")
    p.add_argument("--app-id", default="A0001APP")
    p.add_argument("--bot-id", default="B0001BOT")
    p.add_argument("--bot-user", default="U0456BOT")
    p.add_argument("--bot-name", default="slack-once")
    p.add_argument("--token", help="the one bot token accepted (default: any xoxb- token)")
    p.add_argument("--page-cap", type=int, default=15)
    p.add_argument("--history-per-minute", type=int, default=0, help="0: unlimited")
    p.add_argument("--seed", action="append", default=[], metavar="FILE")
    p.add_argument("--stream-expiry", type=float, default=300.0, metavar="SECONDS")
    p.add_argument("--client-id", help="the app's client id: OAuth installs (oauth.v2.access) on")
    p.add_argument("--client-secret", help="the app's client secret (never printed)")
    p.add_argument("--workflow-token-seconds", type=float, default=900.0, metavar="SECONDS",
                   help="a workflow token (xwfp-) expires this long after it is issued")
    OPT = p.parse_args()
    if bool(OPT.client_id) != bool(OPT.client_secret):
        p.error("--client-id and --client-secret go together")
    global DEFAULT, CUR
    DEFAULT = CUR = installs[OPT.team] = Install(OPT.team, OPT.app_id, OPT.bot_id, OPT.bot_user, OPT.bot_name,
                                                 "Stand-in", channels, reactions)
    for path in OPT.seed:
        with open(path) as f:
            event = json.load(f).get("event") or {}
        if not (event.get("channel") and event.get("ts")):
            p.error(f"{path}: no event with a channel and a ts")
        person(event["channel"], event.get("text"), event.get("user"), event["ts"], event.get("thread_ts"))
        print(f"seeded {event['channel']} {event['ts']} from {path}", flush=True)
    print(f"Slack stand-in on http://127.0.0.1:{OPT.port}/api (page cap {OPT.page_cap}, "
          f"history/replies {OPT.history_per_minute or 'unlimited'} a minute"
          + (f"; OAuth installs for client id {OPT.client_id}" if OPT.client_id else "") + ")", flush=True)
    ThreadingHTTPServer(("127.0.0.1", OPT.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
