//! The endpoints a script or a person drives [`super::FakeSlack`] with (what `slack-once
//! standin` serves for a bot run locally, and what process tests use): what people and Slack
//! do that no Web API call does. JSON bodies; each answers `{ok, …}` or `{ok: false, error}`.
//!
//! - `POST /_standin/messages {channel, ts?, user?, text, thread_ts?, team?}`: a person's
//!   message (a user id as channel: the DM `D`+user).
//! - `POST /_standin/foreign {channel, text?, thread_ts?, metadata?, app_id?, bot_id?, user?,
//!   team?}`: a message of another app (default `A0999OTHER` / `B0999OTHER`).
//! - `POST /_standin/chatter {channel, thread_ts?, count, team?}`: `count` people's messages,
//!   newest of all: `{ok, ts: [...]}`.
//! - `POST /_standin/script {method, behaviours}`: the next calls of a Web API method (or
//!   `response_url`) behave so, one each: `ok` (as ever), `hang` (never answered, nothing
//!   made), `post_then_hang` (made, never answered), `fail:CODE` (`{ok: false, error: CODE}`),
//!   `post_then_fail:CODE` (made, then `{ok: false, error: CODE}`), `status:NNN` (that HTTP
//!   status, nothing made), `ratelimited:SECS` (HTTP 429 with `Retry-After`), `slow:MS` (made
//!   and answered that many milliseconds later).
//! - `POST /_standin/grant {team, scope?, user_scope?, rotation?}` or `{enterprise,
//!   is_enterprise_install: true, scope?, rotation?}`: a person approved the install (with
//!   OAuth set up): `{ok, code}`, a code that works once; else `oauth_not_configured`.
//! - `POST /_standin/revoke {token}` or `{team}`: a person removed the app: that token, or all
//!   of a team's, answers `token_revoked` from then on: `{ok, revoked}`.
//! - `POST /_standin/stop {channel, thread_ts, user?}`: a person pressed stop in that agent
//!   session: the app's streams in the thread stop; `{ok, event}`: the `agent_session_stopped`
//!   event to deliver.
//! - `POST /_standin/execution {callback_id, inputs?, team?}`: a workflow reached the app's
//!   step: `{ok, function_execution_id, workflow_execution_id, bot_access_token}`.
//! - `POST /_standin/execution/token {function_execution_id}`: `{ok, bot_access_token}`, a new
//!   token of that execution (as each request of the step carries one).
//! - `POST /_standin/execution/end {function_execution_id}`: the workflow stopped, or the step
//!   timed out: a running execution ends, its tokens revoked.
//! - `POST /_standin/socket/mention {channel?, text?, user?, copies?}`: over Socket Mode, a
//!   person's message mentioning the bot (added to its conversation) and its `app_mention`
//!   sent as Slack sends it: redelivered while unacknowledged, and with `copies: true` also sent
//!   again under the same envelope and under a new one: `{ok, envelope_id, event_id, ts}`.
//! - `POST /_standin/socket/command {command, text?, user_id?, channel_id?}`: a slash command
//!   over Socket Mode (never redelivered): `{ok, envelope_id}`.
//! - `POST /_standin/socket/recycle {every_seconds}`: connections opened from now on are
//!   recycled that often (`refresh_requested`, closed a second later).
//! - `GET /_standin/state`: what Slack holds now (see [`state`]); its `socket_mode` holds the
//!   app-level token, the connections, the acknowledgements and what Slack gave up on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::recorded::{Recorded, SlackFailure, log_call};
use super::workspace::{self, Workspace};

/// A refusal of an endpoint: its HTTP status and code.
struct Refused(u16, &'static str);

/// `POST /_standin/<endpoint>`.
pub(crate) async fn endpoint(
    State(state): State<Arc<Mutex<Recorded>>>,
    Path(endpoint): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let (status, answer) = match serde_json::from_slice::<Value>(&body) {
        Ok(body @ Value::Object(_)) => {
            let answer = match endpoint.strip_prefix("socket/") {
                Some(socket) => socket_mode(&state, socket, &body),
                None => {
                    let mut s = state.lock().expect("lock");
                    run(&mut s, &endpoint, &body)
                }
            };
            let (status, answer) = match answer {
                Ok(answer) => (200, answer),
                Err(Refused(status, code)) => (status, json!({"ok": false, "error": code})),
            };
            log_call(
                &state,
                &format!("_standin/{endpoint}"),
                false,
                &body,
                &answer,
            );
            (status, answer)
        }
        _ => (400, json!({"ok": false, "error": "invalid_json"})),
    };
    (
        http::StatusCode::from_u16(status).unwrap_or_default(),
        [("content-type", "application/json")],
        answer.to_string(),
    )
        .into_response()
}

/// What a `socket/…` endpoint does: Slack's side of Socket Mode, sending on tasks of its own.
fn socket_mode(
    state: &Arc<Mutex<Recorded>>,
    endpoint: &str,
    body: &Value,
) -> Result<Value, Refused> {
    let socket = super::SocketMode::new(state.clone());
    let text = |k: &str| body[k].as_str().filter(|v| !v.is_empty());
    match endpoint {
        "mention" => {
            let (channel, ts, bot_user) = {
                let mut s = state.lock().expect("lock");
                let w = &mut s.workspace;
                let channel = conversation(text("channel").or(Some("C0SOCKET")))?;
                let ts = w.next_ts();
                let bot_user = w.identity.bot_user.clone();
                let message = json!({
                    "channel": channel, "ts": ts, "user": text("user").unwrap_or("U0123USER"),
                    "text": format!("<@{bot_user}> {}", text("text").unwrap_or("hello")),
                    "team": w.identity.team, "client_msg_id": uuid::Uuid::new_v4().to_string(),
                });
                w.add_message(message);
                (channel, ts, bot_user)
            };
            let callback = socket.event_callback(json!({
                "type": "app_mention", "user": text("user").unwrap_or("U0123USER"),
                "text": format!("<@{bot_user}> {}", text("text").unwrap_or("hello")),
                "channel": channel, "ts": ts, "event_ts": ts,
            }));
            let event_id = callback["event_id"].clone();
            let mut delivery = super::EventDelivery::default();
            if body["copies"] == true {
                delivery.copies = vec![
                    (
                        std::time::Duration::from_millis(300),
                        super::EventCopy::SameEnvelope,
                    ),
                    (
                        std::time::Duration::from_millis(700),
                        super::EventCopy::NewEnvelope,
                    ),
                ];
            }
            let envelope_id = socket.send_event_with(callback, delivery);
            Ok(json!({"ok": true, "envelope_id": envelope_id, "event_id": event_id, "ts": ts}))
        }
        "command" => {
            let command = text("command").ok_or(Refused(400, "missing_command"))?;
            let envelope_id = socket.send_command(json!({
                "command": command, "text": text("text").unwrap_or_default(),
                "user_id": text("user_id").unwrap_or("U0123USER"),
                "channel_id": text("channel_id").unwrap_or("C0SOCKET"),
            }));
            Ok(json!({"ok": true, "envelope_id": envelope_id}))
        }
        "recycle" => {
            let every = body["every_seconds"]
                .as_u64()
                .filter(|s| (1..=86_400).contains(s))
                .ok_or(Refused(400, "invalid_every_seconds"))?;
            let every = std::time::Duration::from_secs(every);
            socket.set_recycling(super::Recycling {
                lifetime: every,
                debug_lifetime: every,
                notice: super::Notice::RefreshRequested,
                grace: std::time::Duration::from_secs(1),
            });
            Ok(json!({"ok": true}))
        }
        _ => Err(Refused(404, "unknown_endpoint")),
    }
}

/// What the endpoint does.
fn run(s: &mut Recorded, endpoint: &str, body: &Value) -> Result<Value, Refused> {
    let text = |k: &str| body[k].as_str().filter(|v| !v.is_empty());
    match endpoint {
        "messages" => {
            let w = team_workspace(s, body);
            let channel = conversation(text("channel"))?;
            let ts = match text("ts") {
                Some(ts)
                    if w.messages()
                        .iter()
                        .any(|m| m["channel"] == channel.as_str() && m["ts"] == ts) =>
                {
                    return Err(Refused(409, "ts_taken"));
                }
                Some(ts) => ts.to_string(),
                None => w.next_ts(),
            };
            let mut message = json!({
                "channel": channel, "ts": ts, "user": text("user").unwrap_or("U0123USER"),
                "text": text("text").unwrap_or_default(), "team": w.identity.team,
                "client_msg_id": uuid::Uuid::new_v4().to_string(),
            });
            if let Some(thread) = text("thread_ts") {
                message["thread_ts"] = thread.into();
            }
            w.add_message(message);
            Ok(json!({"ok": true, "channel": channel, "ts": ts}))
        }
        "foreign" => {
            let w = team_workspace(s, body);
            let channel = conversation(text("channel"))?;
            let ts = w.next_ts();
            let app_id = text("app_id").unwrap_or(workspace::OTHER_APP);
            let bot_id = text("bot_id").unwrap_or("B0999OTHER");
            let mut message = json!({
                "channel": channel, "ts": ts, "text": text("text").unwrap_or("posted by another app"),
                "user": text("user").unwrap_or("U0999OTHER"), "bot_id": bot_id, "app_id": app_id,
                "bot_profile": {"id": bot_id, "app_id": app_id, "name": "other-app"},
            });
            for key in ["thread_ts", "metadata"] {
                if !body[key].is_null() {
                    message[key] = body[key].clone();
                }
            }
            w.add_message(message);
            Ok(json!({"ok": true, "channel": channel, "ts": ts}))
        }
        "chatter" => {
            let w = team_workspace(s, body);
            let channel = conversation(text("channel"))?;
            let count = body["count"].as_u64().unwrap_or(1);
            let people = ["U0123USER", "U0124USER", "U0125USER"];
            let made: Vec<String> = (0..count as usize)
                .map(|i| {
                    let ts = w.next_ts();
                    let mut message = json!({"channel": channel, "ts": ts, "user": people[i % 3],
                                             "text": format!("chatter {}", i + 1)});
                    if let Some(thread) = text("thread_ts") {
                        message["thread_ts"] = thread.into();
                    }
                    w.add_message(message);
                    ts
                })
                .collect();
            Ok(json!({"ok": true, "ts": made}))
        }
        "script" => {
            let method = text("method").ok_or(Refused(200, "invalid_arguments"))?;
            let behaviours = body["behaviours"].as_array().cloned().unwrap_or_default();
            let scripted: Option<Vec<Option<SlackFailure>>> =
                behaviours.iter().map(|b| behaviour(b.as_str()?)).collect();
            let scripted = scripted.ok_or(Refused(200, "invalid_arguments"))?;
            s.failures
                .entry(method.to_string())
                .or_default()
                .extend(scripted);
            Ok(json!({"ok": true}))
        }
        "grant" => grant(s, body),
        "revoke" => {
            let grants = s
                .grants
                .as_mut()
                .ok_or(Refused(200, "oauth_not_configured"))?;
            let revoked = match (text("team"), text("token")) {
                (Some(team), _) => {
                    let n = grants.secrets_of(team).len();
                    grants.revoke_all(team);
                    n
                }
                (None, Some(token)) => usize::from(grants.revoke(token)),
                (None, None) => 0,
            };
            match revoked {
                0 => Err(Refused(404, "token_not_found")),
                n => Ok(json!({"ok": true, "revoked": n})),
            }
        }
        "stop" => {
            let channel = conversation(text("channel"))?;
            let thread = text("thread_ts").ok_or(Refused(200, "invalid_arguments"))?;
            let user = text("user").unwrap_or("U0123USER");
            let event = s.workspace.stop_session(&channel, thread, user);
            Ok(json!({"ok": true, "event": event}))
        }
        "execution" => {
            let callback_id = text("callback_id").ok_or(Refused(200, "invalid_arguments"))?;
            let team =
                text("team").map_or_else(|| s.workspace.identity.team.clone(), str::to_string);
            let inputs = match &body["inputs"] {
                Value::Null => json!({}),
                inputs => inputs.clone(),
            };
            let (id, workflow, token) = s.workspace.executions.start(callback_id, inputs, &team);
            Ok(json!({"ok": true, "function_execution_id": id,
                      "workflow_execution_id": workflow, "bot_access_token": token}))
        }
        "execution/token" => {
            let id = text("function_execution_id").unwrap_or_default();
            match s.workspace.executions.token(id) {
                Some(token) => Ok(json!({"ok": true, "bot_access_token": token})),
                None => Err(Refused(200, "function_execution_not_found")),
            }
        }
        "execution/end" => {
            let id = text("function_execution_id").unwrap_or_default();
            match s.workspace.executions.end(id) {
                true => Ok(json!({"ok": true})),
                false => Err(Refused(200, "function_execution_not_found")),
            }
        }
        _ => Err(Refused(404, "unknown_endpoint")),
    }
}

/// The conversation a script names: a user id is the DM between that user and the bot.
fn conversation(channel: Option<&str>) -> Result<String, Refused> {
    match channel {
        None => Err(Refused(200, "channel_not_found")),
        Some(c) if c.starts_with(['U', 'W']) => Ok(format!("D{c}")),
        Some(c) => Ok(c.to_string()),
    }
}

/// The workspace a script's `team` names (the default one without).
fn team_workspace<'a>(s: &'a mut Recorded, body: &Value) -> &'a mut Workspace {
    match body["team"].as_str().filter(|t| !t.is_empty()) {
        Some(team) => s.workspace_of(team),
        None => &mut s.workspace,
    }
}

/// A behaviour of `/_standin/script`: `None` for one it does not know.
fn behaviour(text: &str) -> Option<Option<SlackFailure>> {
    Some(match text {
        "ok" => None,
        "hang" => Some(SlackFailure::Unanswered),
        "post_then_hang" => Some(SlackFailure::MadeUnanswered),
        _ if text.starts_with("status:") => Some(SlackFailure::Status(
            text["status:".len()..]
                .parse()
                .ok()
                .filter(|s| (100..600).contains(s))?,
        )),
        _ if text.starts_with("ratelimited:") => Some(SlackFailure::RateLimited(
            text["ratelimited:".len()..].parse().ok()?,
        )),
        _ if text.starts_with("slow:") => Some(SlackFailure::Slow(
            std::time::Duration::from_millis(text["slow:".len()..].parse().ok()?),
        )),
        _ if text.starts_with("post_then_fail:") => {
            let code = &text["post_then_fail:".len()..];
            let code = if code.is_empty() {
                "internal_error"
            } else {
                code
            };
            Some(SlackFailure::MadeThenCode(Box::leak(
                code.to_string().into_boxed_str(),
            )))
        }
        _ => {
            let code = text.strip_prefix("fail:")?;
            let code = if code.is_empty() {
                "internal_error"
            } else {
                code
            };
            // A few bytes a script names, kept for the stand-in's life.
            Some(SlackFailure::Code(Box::leak(
                code.to_string().into_boxed_str(),
            )))
        }
    })
}

/// `POST /_standin/grant`: a person approved the install.
fn grant(s: &mut Recorded, body: &Value) -> Result<Value, Refused> {
    let grants = s
        .grants
        .as_mut()
        .ok_or(Refused(200, "oauth_not_configured"))?;
    let text = |k: &str| body[k].as_str().filter(|v| !v.is_empty());
    let scope = text("scope").unwrap_or("chat:write,commands");
    let rotation = body["rotation"] == true;
    let code = match (
        text("enterprise"),
        body["is_enterprise_install"] == true,
        text("team"),
    ) {
        (Some(enterprise), true, _) => grants.grant_org(enterprise, scope, rotation),
        (_, _, Some(team)) => grants.grant(
            team,
            scope,
            text("user_scope").unwrap_or_default(),
            rotation,
        ),
        _ => return Err(Refused(200, "invalid_arguments")),
    };
    Ok(json!({"ok": true, "code": code}))
}

/// `GET /_standin/state`: what Slack holds now, for a person or a script trying a bot: the
/// `messages` by conversation (oldest first), `ephemerals`, `reactions`, `views`, `calls`
/// (every call: `n`, `method`, `bearer`, `args` without tokens or secrets, `error`),
/// `executions`, agent `sessions`, `assistant` calls, `task_updates` (`"channel ts task"` →
/// statuses); with OAuth also `oauth_exchanges`, `live_tokens` (by team) and `teams` (each
/// other team's messages).
pub(crate) async fn state(State(state): State<Arc<Mutex<Recorded>>>) -> Response {
    let s = state.lock().expect("lock");
    let w = &s.workspace;
    let reactions: Vec<Value> = w
        .reactions()
        .into_iter()
        .map(|(channel, ts, name)| json!({"channel": channel, "ts": ts, "name": name}))
        .collect();
    let sessions: Vec<Value> = w
        .sessions()
        .into_iter()
        .map(|((channel, thread_ts), mut session)| {
            session["channel"] = channel.into();
            session["thread_ts"] = thread_ts.into();
            session
        })
        .collect();
    let assistant: Vec<Value> = w
        .assistant_calls()
        .iter()
        .map(|(method, channel, thread_ts, args)| {
            json!({"method": method, "channel_id": channel, "thread_ts": thread_ts, "args": args})
        })
        .collect();
    let task_updates: BTreeMap<String, &Vec<String>> = w
        .task_updates()
        .iter()
        .map(|((channel, ts, task), statuses)| (format!("{channel} {ts} {task}"), statuses))
        .collect();
    let mut shown = json!({
        "ok": true,
        "messages": by_channel(w),
        "ephemerals": w.ephemerals(),
        "reactions": reactions,
        "views": w.views(),
        "calls": s.log,
        "executions": w.executions.shown(),
        "sessions": sessions,
        "assistant": assistant,
        "task_updates": task_updates,
        "socket_mode": s.socket.shown(),
    });
    if let Some(grants) = &s.grants {
        let exchanges: Vec<Value> = grants
            .exchanges()
            .iter()
            .map(|e| json!({"grant_type": e.grant_type, "team": e.owner, "ok": e.ok}))
            .collect();
        let live: BTreeMap<&String, usize> = grants
            .exchanges()
            .iter()
            .filter_map(|e| e.owner.as_ref())
            .map(|owner| (owner, grants.live_tokens(owner).len()))
            .collect();
        let teams: BTreeMap<&String, Value> = s
            .others
            .iter()
            .map(|(team, w)| (team, json!({"messages": by_channel(w)})))
            .collect();
        shown["oauth_exchanges"] = json!(exchanges);
        shown["live_tokens"] = json!(live);
        shown["teams"] = json!(teams);
    }
    ([("content-type", "application/json")], shown.to_string()).into_response()
}

/// A workspace's messages by conversation, oldest first.
fn by_channel(w: &Workspace) -> BTreeMap<String, Vec<Value>> {
    let mut by_channel: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for m in w.messages() {
        let channel = m["channel"].as_str().unwrap_or_default().to_string();
        by_channel.entry(channel).or_default().push(m.clone());
    }
    for messages in by_channel.values_mut() {
        messages.sort_by_key(|m| m["ts"].as_str().and_then(workspace::micros));
    }
    by_channel
}
