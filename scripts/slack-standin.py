#!/usr/bin/env python3
"""A stand-in for Slack's Web API on 127.0.0.1 that behaves like Slack wherever a bot's
correctness can depend on it (standard library only). Stop it with Ctrl-C.

    scripts/slack-standin.py [PORT] [options]          (PORT default 4000)
    export SLACK_API_URL=http://127.0.0.1:4000/api SLACK_BOT_TOKEN=xoxb-local

One workspace with one app installed. Options:
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
answer message_not_in_streaming_state. assistant.threads.setStatus / setSuggestedPrompts /
setTitle answer ok (channel_id and thread_ts required) and are kept in /_standin/state.

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
Each call is printed on one line (method, whether a bearer token came, arguments); never a token.

Lenient where Slack's behaviour is unknown: posting to an unseen channel id creates it; a reply
to a reply joins its thread; blocks are derived from text; replies' parent counts in the limit.
"""
import argparse
import base64
import json
import math
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
scripts = {}       # method -> deque of scripted behaviours (POST /_standin/script)
last_us = 0        # the newest ts handed out or stored, in microseconds


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
    if channel not in channels:
        if not create:
            raise Fail("channel_not_found")
        channels[channel] = {}
    return channel


def store(channel, message):
    global last_us
    msgs = channels.setdefault(channel, {})
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
               "ts": ts_text(micros(ts)) if ts else new_ts(), "team": OPT.team,
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
               "app_id": app_id, "text": text, "team": OPT.team,
               "bot_profile": {"id": bot_id, "app_id": app_id, "name": name, "deleted": False,
                               "updated": int(time.time()), "team_id": OPT.team}}
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
    replies = [r for r in channels[channel].values()
               if r.get("thread_ts") == m["ts"] and r["ts"] != m["ts"]]
    if replies:
        users = list(dict.fromkeys(r.get("user") for r in replies))
        m.update(thread_ts=m["ts"], reply_count=len(replies), reply_users_count=len(users),
                 reply_users=users, latest_reply=max(r["ts"] for r in replies))
    found = reactions.get((channel, m["ts"]))
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
    selected = [m for m in channels[channel].values()
                if (m.get("thread_ts", m["ts"]) == m["ts"] or m.get("subtype") == "thread_broadcast")
                and within(m["ts"], lo, hi, inclusive, cursor)]
    selected.sort(key=lambda m: micros(m["ts"]), reverse=True)
    return page({"ok": True, "pin_count": 0}, channel, selected, limit, meta)


def replies(args):
    channel = conversation(args.get("channel"))
    msgs = channels[channel]
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


def own_message(args, refusal):
    channel = conversation(args.get("channel"))
    message = channels[channel].get(str(args.get("ts")))
    if message is None or message.get("subtype") == "tombstone":
        raise Fail("message_not_found")
    if message.get("bot_id") != OPT.bot_id:
        raise Fail(refusal)
    return channel, message


def web_api(method, args):
    if method == "chat.postMessage":
        channel = conversation(args.get("channel"), create=True)
        m = bot_post(channel, args, OPT.app_id, OPT.bot_id, OPT.bot_user, OPT.bot_name)
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
        m["edited"] = {"user": OPT.bot_user, "ts": new_ts()}
        m.pop("streaming", None)
        return {"ok": True, "channel": channel, "ts": m["ts"], "text": m["text"],
                "message": shown(channel, m)}
    if method == "chat.delete":
        channel, m = own_message(args, "cant_delete_message")
        if any(r.get("thread_ts") == m["ts"] and r["ts"] != m["ts"] for r in channels[channel].values()):
            channels[channel][m["ts"]] = {"type": "message", "subtype": "tombstone", "hidden": True,
                                          "text": "This message was deleted.", "user": "USLACKBOT",
                                          "ts": m["ts"]}
        else:
            del channels[channel][m["ts"]]
        reactions.pop((channel, m["ts"]), None)
        return {"ok": True, "channel": channel, "ts": m["ts"]}
    if method in ("reactions.add", "reactions.remove"):
        channel = conversation(args.get("channel"))
        ts, name = str(args.get("timestamp")), str(args.get("name", "")).strip(":")
        if ts not in channels[channel]:
            raise Fail("message_not_found")
        users = reactions.setdefault((channel, ts), {}).setdefault(name, [])
        if method == "reactions.add":
            if OPT.bot_user in users:
                raise Fail("already_reacted")
            users.append(OPT.bot_user)
        else:
            if OPT.bot_user not in users:
                raise Fail("no_reaction")
            users.remove(OPT.bot_user)
        reactions[(channel, ts)] = {n: u for n, u in reactions[(channel, ts)].items() if u}
        return {"ok": True}
    if method == "chat.postEphemeral":
        channel = conversation(args.get("channel"), create=True)
        if not args.get("user"):
            raise Fail("user_not_in_channel")
        ts = new_ts()
        ephemerals.append({"channel": channel, "user": args["user"], "message_ts": ts,
                           "text": args.get("text"), "blocks": json_arg(args, "blocks", "invalid_blocks_format")})
        return {"ok": True, "message_ts": ts}
    if method in ("conversations.history", "conversations.replies"):
        check_rate(method)
        return history(args) if method == "conversations.history" else replies(args)
    if method == "conversations.open":
        users = str(args.get("users") or "").replace(" ", "")
        if not users and not args.get("channel"):
            raise Fail("users_list_not_supplied")
        channel = str(args.get("channel") or "D" + users.replace(",", ""))
        known = channel in channels
        channels.setdefault(channel, {})
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
        bot = user == OPT.bot_user
        name = OPT.bot_name if bot else user.lower()
        profile = {"real_name": name, "display_name": name, **({"bot_id": OPT.bot_id} if bot else {})}
        return {"ok": True, "user": {"id": user, "team_id": OPT.team, "name": name, "real_name": name,
                                     "deleted": False, "is_bot": bot, "profile": profile}}
    if method == "bots.info":
        if args.get("bot") != OPT.bot_id:
            raise Fail("bot_not_found")
        return {"ok": True, "bot": {"id": OPT.bot_id, "deleted": False, "name": OPT.bot_name,
                                    "app_id": OPT.app_id, "user_id": OPT.bot_user, "updated": 1700000000}}
    if method == "chat.startStream":
        channel = conversation(args.get("channel"), create=True)
        if not args.get("thread_ts"):
            raise Fail("invalid_arguments")
        if not channel.startswith("D"):  # outside a DM Slack asks whom the stream is for
            if not args.get("recipient_team_id"):
                raise Fail("missing_recipient_team_id")
            if not args.get("recipient_user_id"):
                raise Fail("missing_recipient_user_id")
        if args.get("recipient_team_id") and args["recipient_team_id"] != OPT.team:
            raise Fail("user_not_found")  # a Slack Connect author of another organisation
        message = {"user": OPT.bot_user, "type": "message", "ts": new_ts(), "bot_id": OPT.bot_id,
                   "app_id": OPT.app_id, "text": str(args.get("markdown_text") or ""), "team": OPT.team,
                   "thread_ts": str(args["thread_ts"]), "streaming": True, "stream_started": time.monotonic(),
                   "bot_profile": {"id": OPT.bot_id, "app_id": OPT.app_id, "name": OPT.bot_name,
                                   "deleted": False, "updated": int(time.time()), "team_id": OPT.team}}
        store(channel, message)
        return {"ok": True, "channel": channel, "ts": message["ts"]}
    if method in ("chat.appendStream", "chat.stopStream"):
        channel, m = own_message(args, "cant_update_message")
        if not m.get("streaming") or time.monotonic() - m.get("stream_started", 0) > OPT.stream_expiry:
            m["streaming"] = False
            raise Fail("message_not_in_streaming_state")
        m["text"] = m.get("text", "") + str(args.get("markdown_text") or "")
        if method == "chat.stopStream":
            m["streaming"] = False
            blocks = json_arg(args, "blocks", "invalid_blocks_format")
            if blocks:
                m["blocks"] = blocks
            metadata = metadata_arg(args)
            if metadata is not None:
                m["metadata"] = metadata
        return {"ok": True, "channel": channel, "ts": m["ts"]}
    if method in ("assistant.threads.setStatus", "assistant.threads.setSuggestedPrompts",
                  "assistant.threads.setTitle"):
        if not (args.get("channel_id") and args.get("thread_ts")):
            raise Fail("invalid_arguments")
        assistant.append({"method": method, "channel_id": args["channel_id"],
                          "thread_ts": args["thread_ts"], "args": args})
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
                                           for v in views.values()):
            raise Fail("duplicate_external_id")
        triggers.add(trigger)
        view = {**view, "id": f"V{len(views) + 1:010d}", "hash": f"{time.time():.6f}.hash",
                "app_id": OPT.app_id, "team_id": OPT.team}
        views[view["id"]] = view
        return {"ok": True, "view": view}
    if method == "views.update":
        # By its id, or by the external_id the app gave it.
        view_id = args.get("view_id")
        if not view_id and args.get("external_id"):
            view_id = next((i for i, v in views.items()
                            if v.get("external_id") == args["external_id"]), None)
        if view_id not in views:
            raise Fail("not_found")
        view = {**json_arg(args, "view", "invalid_arguments"), "id": view_id,
                "hash": f"{time.time():.6f}.hash"}
        if "external_id" not in view and views[view_id].get("external_id"):
            view["external_id"] = views[view_id]["external_id"]
        views[view_id] = view
        return {"ok": True, "view": view}
    if method == "auth.test":
        return {"ok": True, "url": "https://standin.slack.com/", "team": "Stand-in",
                "user": OPT.bot_name, "team_id": OPT.team, "user_id": OPT.bot_user,
                "bot_id": OPT.bot_id, "is_enterprise_install": False}
    return {"ok": True}


def respond(path, body):
    """A post to a response URL, as Slack answers it."""
    parts = path.strip("/").split("/")
    if len(parts) == 4 and parts[0] == "commands":
        channel, message_ts = parts[2], None
    elif len(parts) == 5 and parts[0] == "actions":
        channel, message_ts = parts[2], parts[3]
    else:
        raise Fail("invalid_url", 404)
    uses = hooks.setdefault(path, [0, time.monotonic()])
    if time.monotonic() - uses[1] > 1800:
        raise Fail("expired_url", 404)
    if uses[0] >= 5:
        raise Fail("used_url", 404)
    uses[0] += 1
    channel = conversation(channel, create=True)
    if body.get("delete_original") in (True, "true"):
        if message_ts in channels[channel]:
            del channels[channel][message_ts]
        return {"ok": True}
    if body.get("replace_original") in (True, "true"):
        m = channels[channel].get(str(message_ts))
        if m is None:
            raise Fail("message_not_found", 404)
        for key in ("text", "blocks", "attachments"):
            m[key] = body.get(key)
        return {"ok": True}
    if not (body.get("text") or body.get("blocks")):
        raise Fail("no_text", 400)
    if body.get("response_type") == "in_channel":
        bot_post(channel, body, OPT.app_id, OPT.bot_id, OPT.bot_user, OPT.bot_name)
    else:
        ephemerals.append({"channel": channel, "text": body.get("text"), "blocks": body.get("blocks")})
    return {"ok": True}


def standin(path, body):
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
        """(HTTP status, headers, answer, the arguments as printed: without a token)."""
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
                                 "assistant": assistant,
                                 "reactions": [{"channel": c, "ts": t, "name": n, "users": u}
                                               for (c, t), r in reactions.items() for n, u in r.items()]}, {}
            if url.path.startswith("/_standin/"):
                return 200, {}, standin(url.path, body), args
            if hook:
                return 200, {}, respond(url.path, body), args
            if not token:
                raise Fail("not_authed")
            if not str(token).startswith("xoxb-") or (OPT.token and token != OPT.token):
                raise Fail("invalid_auth")
            return 200, {}, web_api(url.path.rstrip("/").rsplit("/", 1)[-1], args), args
        except Fail as fail:
            return fail.status, fail.headers, {"ok": False, "error": fail.error}, args
        except Exception as error:  # a fault of the stand-in itself: say so, keep serving
            traceback.print_exc()
            return 500, {}, {"ok": False, "error": f"standin_fault: {error!r}"}, args

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
    OPT = p.parse_args()
    for path in OPT.seed:
        with open(path) as f:
            event = json.load(f).get("event") or {}
        if not (event.get("channel") and event.get("ts")):
            p.error(f"{path}: no event with a channel and a ts")
        person(event["channel"], event.get("text"), event.get("user"), event["ts"], event.get("thread_ts"))
        print(f"seeded {event['channel']} {event['ts']} from {path}", flush=True)
    print(f"Slack stand-in on http://127.0.0.1:{OPT.port}/api (page cap {OPT.page_cap}, "
          f"history/replies {OPT.history_per_minute or 'unlimited'} a minute)", flush=True)
    ThreadingHTTPServer(("127.0.0.1", OPT.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
