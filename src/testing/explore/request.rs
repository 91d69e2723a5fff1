//! The requests the explorer plays, as Slack sends them: an event (with Slack's retries), a
//! person's message with its copies (an `app_mention` and a `message` event of one message,
//! and a phantom copy under another `ts` with the same `client_msg_id`), a slash command, a
//! button, a view submission, a shortcut, an assistant's question.

use std::time::Duration;

use serde_json::{Value, json};

use crate::testing::{BOT_USER, Identity, Workspace};

/// The `client_msg_id` of a person's message.
const CLIENT_MSG_ID: &str = "5f0c1a7e-0d1e-4c3b-9a2f-explorer0001";

/// A request to explore. Built with its constructors, then [`Request::as_user`],
/// [`Request::in_channel`].
#[derive(Clone, Debug)]
pub struct Request {
    pub(crate) kind: Kind,
    pub(crate) user: String,
    pub(crate) channel: String,
    /// A message's copies: its other event and the phantom copy.
    pub(crate) copies: bool,
    /// Of a message's copies, the phantom one.
    pub(crate) phantom: bool,
    /// No listener takes it, and the test says that is intended ([`Request::unhandled`]).
    pub(crate) unhandled: bool,
    /// An interaction in the newest step execution ([`Request::in_step`]).
    pub(crate) in_step: bool,
    /// Sent with the request before it ([`Request::with_previous`]).
    pub(crate) with_previous: bool,
}

/// Which message a click is on.
#[derive(Clone, Debug)]
pub(crate) enum On {
    /// Outside any message (a button in a view, on the App Home).
    Nothing,
    /// A message of the bot's that says this, in Slack before the schedule starts.
    Text(String),
    /// The newest message of the bot's in the channel with this button, when the click is
    /// sent (one an earlier request of a sequence posted).
    Posted,
}

#[derive(Clone, Debug)]
pub(crate) enum Kind {
    /// A bare event (the inner event).
    Event(Value),
    /// A person's message: mentioning the bot or not; in a DM when the channel says so.
    Message {
        text: String,
        mention: bool,
    },
    Command {
        command: String,
        text: String,
    },
    /// A button on a message of the bot's (with this text), or outside any message.
    Click {
        action_id: String,
        value: String,
        on: On,
    },
    Shortcut {
        callback_id: String,
        message: bool,
    },
    /// A view the bot opened, submitted with these values: this view (opened before the
    /// schedule starts), or (`None`) the one the bot opened with this `callback_id` in an
    /// earlier request of a sequence.
    ViewSubmission {
        view: Option<Value>,
        callback_id: String,
        values: Value,
    },
    /// A person presses the stop button of the session whose answer streams in the channel
    /// (the newest stream of the bot's there): Slack stops it, then sends
    /// `agent_session_stopped`.
    StopSession,
    /// A workflow reaching the app's step: `function_executed`.
    Step {
        callback_id: String,
        inputs: Value,
    },
}

impl Request {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            user: crate::testing::USER.into(),
            channel: crate::testing::CHANNEL.into(),
            copies: true,
            phantom: true,
            unhandled: false,
            in_step: false,
            with_previous: false,
        }
    }

    /// A workflow reaches the app's step `callback_id` with `inputs`: Slack starts an
    /// execution and sends `function_executed` with the execution's token, retried as every
    /// event is.
    pub fn step(callback_id: &str, inputs: Value) -> Self {
        Self::new(Kind::Step {
            callback_id: callback_id.into(),
            inputs,
        })
    }

    /// In a sequence: an interaction (a click, a view submission) in the step execution an
    /// earlier request started (the newest): it carries the execution's `function_data` and
    /// a new token of the execution, as Slack's does.
    pub fn in_step(mut self) -> Self {
        self.in_step = true;
        self
    }

    /// In a sequence (or a simulation's scene): sent at the same moment as the request before
    /// it, rather than after it (a double click on one button, a second approver clicking
    /// beside the first).
    pub fn with_previous(mut self) -> Self {
        self.with_previous = true;
        self
    }

    /// A person's message mentioning the bot: it arrives as an `app_mention` and a `message`
    /// event (one message, two event ids), and again as a phantom copy under another `ts`
    /// with the same `client_msg_id`, 21 s later.
    pub fn mention(text: &str) -> Self {
        Self::new(Kind::Message {
            text: format!("<@{BOT_USER}> {text}"),
            mention: true,
        })
    }

    /// A person's message in the channel (a `message` event, and its phantom copy).
    pub fn message(text: &str) -> Self {
        Self::new(Kind::Message {
            text: text.to_string(),
            mention: false,
        })
    }

    /// A direct message to the bot (in `D0TEST`), and its phantom copy.
    pub fn dm(text: &str) -> Self {
        Self::message(text).in_channel("D0TEST")
    }

    /// In a sequence: the person presses the stop button while the bot's answer streams in
    /// the DM (`D0TEST`): sent once a stream of the bot's is there, at once (Slack stops the
    /// stream, then sends `agent_session_stopped`, retried as every event is). Slack's stand-in
    /// keeps what the stopped message showed, and the explorer checks that nothing changes it
    /// or follows it in its thread, and that its session is not made processing again.
    ///
    /// ```
    /// # use slack_once::testing::explore::{Explorer, Request};
    /// # fn app() -> slack_once::app::App { slack_once::app::App::new() }
    /// let explorer = Explorer::new(app)
    ///     .sequence([Request::assistant_question("a long one"), Request::stop_session()]);
    /// ```
    pub fn stop_session() -> Self {
        Self::new(Kind::StopSession).in_channel("D0TEST")
    }

    /// A question to an AI assistant: a direct message, which starts a thread of its own.
    pub fn assistant_question(text: &str) -> Self {
        Self::dm(text)
    }

    /// Any other event (the inner event: `{"type": "team_join", …}`), in an envelope of its
    /// own, retried by Slack as every event is.
    pub fn event(event: Value) -> Self {
        Self::new(Kind::Event(event))
    }

    /// A slash command (`"/once"`) with `text`.
    pub fn command(command: &str, text: &str) -> Self {
        Self::new(Kind::Command {
            command: command.into(),
            text: text.into(),
        })
    }

    /// A click on the button `action_id` (with `value`), outside any message (see
    /// [`Request::on_message`]).
    pub fn click(action_id: &str, value: &str) -> Self {
        Self::new(Kind::Click {
            action_id: action_id.into(),
            value: value.into(),
            on: On::Nothing,
        })
    }

    /// A global shortcut.
    pub fn shortcut(callback_id: &str) -> Self {
        Self::new(Kind::Shortcut {
            callback_id: callback_id.into(),
            message: false,
        })
    }

    /// A message shortcut, on a person's message.
    pub fn message_shortcut(callback_id: &str) -> Self {
        Self::new(Kind::Shortcut {
            callback_id: callback_id.into(),
            message: true,
        })
    }

    /// The submission of `view` (a modal as the bot opens it: its `callback_id` picks the
    /// listener), with `values` (`{block_id: {action_id: {"type": …, "value": …}}}`). The view
    /// is open in Slack before the schedule starts.
    pub fn view_submission(view: Value, values: Value) -> Self {
        let callback_id = view["callback_id"].as_str().unwrap_or_default().to_string();
        Self::new(Kind::ViewSubmission {
            view: Some(view),
            callback_id,
            values,
        })
    }

    /// In a sequence ([`super::Explorer::sequence`]): the submission of the view the bot
    /// opened with this `callback_id` in an earlier request (the newest such), with `values`
    /// (`{block_id: {action_id: {"type": …, "value": …}}}`). If the bot opened none, the
    /// person has nothing to submit: in the fault-free run, the exploration fails and says so.
    pub fn submit_opened_view(callback_id: &str, values: Value) -> Self {
        Self::new(Kind::ViewSubmission {
            view: None,
            callback_id: callback_id.into(),
            values,
        })
    }

    /// From `user` (a person's id) rather than `U0USER`.
    pub fn as_user(mut self, user: &str) -> Self {
        self.user = user.to_string();
        self
    }

    /// In `channel` (a DM's id starts with `D`) rather than `C0TEST`.
    pub fn in_channel(mut self, channel: &str) -> Self {
        self.channel = channel.to_string();
        self
    }

    /// A click on a message of the bot's that says `text` (it is in Slack before the schedule
    /// starts), and gets the click's `response_url`.
    pub fn on_message(mut self, text: &str) -> Self {
        if let Kind::Click { on, .. } = &mut self.kind {
            *on = On::Text(text.to_string());
        }
        self
    }

    /// In a sequence ([`super::Explorer::sequence`]): a click on the button `action_id` of
    /// the newest message of the bot's in the channel that has one (an earlier request posted
    /// it), sent once that message is in Slack, as a person clicks what they see. The click
    /// carries what Slack's would: the message, the button's `value` and `block_id` (the
    /// request's `value` where the button has none), a `response_url`. If no message of the
    /// bot's has that button (a typo in an action id), the person has nothing to click: in
    /// the fault-free run, the exploration fails and says so. On feedback buttons
    /// (`feedback_buttons` of that `action_id`), the request's `value` `negative` presses the
    /// negative button, any other the positive one, as Slack sends the click.
    pub fn on_posted_message(mut self) -> Self {
        if let Kind::Click { on, .. } = &mut self.kind {
            *on = On::Posted;
        }
        self
    }

    /// No listener takes this request, and that is intended (a button only a URL opens, an
    /// event the bot subscribes to and ignores). Without it, a request no listener takes fails
    /// the exploration: it is most often a typo in an action id or a callback id.
    pub fn unhandled(mut self) -> Self {
        self.unhandled = true;
        self
    }

    /// A message without its phantom copy (a mention still arrives as its two events).
    pub fn without_phantom(mut self) -> Self {
        self.phantom = false;
        self
    }

    /// A message as one event only: no second event, no phantom copy.
    pub fn without_copies(mut self) -> Self {
        self.copies = false;
        self
    }

    /// What the request is, in a few words.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Event(e) => format!("the event {}", e["type"].as_str().unwrap_or("?")),
            Kind::Message {
                text,
                mention: true,
            } => format!("a mention {text:?}"),
            Kind::Message { text, .. } if self.channel.starts_with('D') => {
                format!("a direct message {text:?}")
            }
            Kind::Message { text, .. } => format!("a message {text:?}"),
            Kind::Command { command, text } => format!("the command {command} {text:?}"),
            Kind::Click { action_id, .. } => format!("a click on {action_id}"),
            Kind::Shortcut { callback_id, .. } => format!("the shortcut {callback_id}"),
            Kind::ViewSubmission { callback_id, .. } => {
                format!("a submission of the view {callback_id}")
            }
            Kind::Step { callback_id, .. } => format!("the workflow step {callback_id}"),
            Kind::StopSession => "the person's stop of the streaming answer".to_string(),
        }
    }

    /// Whether it is about something the bot shows in Slack (a click on its posted message,
    /// the submission of a view it opened): sent once that is there.
    pub(crate) fn waits_for_slack(&self) -> bool {
        matches!(
            &self.kind,
            Kind::Click { on: On::Posted, .. }
                | Kind::ViewSubmission { view: None, .. }
                | Kind::StopSession
        )
    }

    /// Whether what it waits for is in Slack, where looking changes nothing (`None`: ask
    /// [`prepare`]). A stop waits for a stream of the bot's in the channel, and is pressed
    /// at once.
    pub(crate) fn ready(&self, workspace: &Workspace) -> Option<bool> {
        match self.kind {
            Kind::StopSession => Some(streaming_in(workspace, &self.channel).is_some()),
            _ => None,
        }
    }

    /// Whether Slack retries it (events) or sends it once (commands, interactions).
    pub(crate) fn is_event(&self) -> bool {
        matches!(
            self.kind,
            Kind::Event(_) | Kind::Message { .. } | Kind::Step { .. } | Kind::StopSession
        )
    }
}

/// One copy of the request as Slack sends it: its body, and when (from the request's start).
#[derive(Clone, Debug)]
pub(crate) struct Copy {
    pub label: String,
    pub body: String,
    pub form: bool,
    pub offset: Duration,
}

/// A request made ready to send: its copies, and (a person's message) its `ts` and its
/// phantom copy's.
pub(crate) struct Prepared {
    pub copies: Vec<Copy>,
    pub phantom: Option<(String, String)>,
    /// The step execution it is in (a step's own request, or an interaction in one).
    pub execution: Option<String>,
}

/// An interaction's payload made one in the newest step execution: its `function_data`, a new
/// token of the execution, the interactivity Slack adds. `Err` when no execution was started.
fn in_step(workspace: &mut Workspace, payload: &mut Value) -> Result<String, String> {
    let newest = workspace
        .executions
        .newest()
        .map(|e| (e.id.clone(), e.callback_id.clone(), e.inputs.clone()))
        .ok_or("no step execution was started to interact in")?;
    let (id, callback_id, inputs) = newest;
    payload["function_data"] = json!({
        "execution_id": id, "function": {"callback_id": callback_id}, "inputs": inputs,
    });
    if let Some(token) = workspace.executions.token(&id) {
        payload["bot_access_token"] = token.into();
    }
    payload["interactivity"] = json!({
        "interactor": {"id": payload["user"]["id"].clone(), "secret": "not-a-secret"},
        "interactivity_pointer": payload["trigger_id"].clone(),
    });
    Ok(id)
}

/// The thread of the newest stream of the bot's in `channel` that is streaming.
fn streaming_in(workspace: &Workspace, channel: &str) -> Option<String> {
    workspace
        .ours()
        .into_iter()
        .rev()
        .find(|m| m["channel"] == channel && m["streaming"] == true)
        .and_then(|m| m["thread_ts"].as_str().map(str::to_string))
}

/// An event of the app `to` names, in its workspace, as Slack sends it.
fn envelope(to: &Identity, event_id: &str, event: Value) -> String {
    json!({
        "token": "unused", "team_id": to.team, "api_app_id": to.app_id,
        "type": "event_callback", "event_id": event_id, "event_time": 1_767_225_600,
        "event": event,
        "authorizations": [{"team_id": to.team, "user_id": to.bot_user, "is_bot": true}]
    })
    .to_string()
}

/// A `trigger_id` minted at `ms` (Slack's shape: `{epoch ms}.{n}.{hex}`).
fn trigger_id(ms: u64, n: u32) -> String {
    format!("{ms}.{:09}.{:020x}", 100 + n, 0x5eed_u64 + u64::from(n))
}

/// The button `action_id` in a message's blocks (an actions block's element, a section's
/// accessory): its block's id and the element.
fn button_in(message: &Value, action_id: &str) -> Option<(String, Value)> {
    for block in message["blocks"].as_array()? {
        let block_id = block["block_id"].as_str().unwrap_or("b").to_string();
        let elements = block["elements"].as_array().cloned().unwrap_or_default();
        let accessory = block.get("accessory").cloned().into_iter();
        for element in elements.into_iter().chain(accessory) {
            if element["action_id"] == action_id {
                return Some((block_id, element));
            }
        }
    }
    None
}

/// What the explorer puts in Slack before the request, and the copies it sends. `n` is the
/// request's place in its exploration (from 0: its ids and the `ts` of its message are its
/// own); `now_ms` the time it is sent (epoch ms); `origin` the fake's (response URLs name it).
/// `Err`: the request cannot be sent (a click on a message no earlier request posted), and why.
pub(crate) fn prepare(
    request: &Request,
    n: usize,
    workspace: &mut Workspace,
    now_ms: u64,
    origin: &str,
) -> Result<Prepared, String> {
    let (user, channel) = (request.user.as_str(), request.channel.as_str());
    // The app and workspace the request is for: the workspace's (a simulation's tenant).
    let to = workspace.identity.clone();
    let (team, app_id) = (to.team.as_str(), to.app_id.as_str());
    let dm = channel.starts_with('D');
    let k = n as u32;
    // The first request's message was posted just before the schedule: `MESSAGE_TS`; a later
    // one's just before it is sent. The phantom copy's 21 s later.
    let posted_s = now_ms / 1000 - 1;
    let message_ts = format!("{posted_s}.{:06}", 100 + n);
    let phantom_ts = format!("{}.{:06}", posted_s + 21, 100 + n);
    let event_id = |copy: u32| format!("Ev{n}EXPLORE{copy}");
    let form = |payload: Value| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish()
    };
    let one = |label: &str, body: String, form: bool| Copy {
        label: label.to_string(),
        body,
        form,
        offset: Duration::ZERO,
    };
    let only = |copies: Vec<Copy>| {
        Ok(Prepared {
            copies,
            phantom: None,
            execution: None,
        })
    };
    // An interaction, in the newest step execution when the request says so.
    let send = |workspace: &mut Workspace, label: &str, payload: Value| {
        let mut payload = payload;
        let execution = match request.in_step {
            true => Some(in_step(workspace, &mut payload)?),
            false => None,
        };
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        Ok(Prepared {
            copies: vec![Copy {
                label: label.to_string(),
                body,
                form: true,
                offset: Duration::ZERO,
            }],
            phantom: None,
            execution,
        })
    };
    let interaction = |mut payload: Value| {
        for (key, value) in [
            ("team", json!({"id": team})),
            ("user", json!({"id": user, "team_id": team})),
            ("api_app_id", json!(app_id)),
            ("trigger_id", json!(trigger_id(now_ms, 1 + 10 * k))),
        ] {
            if payload.get(key).is_none() {
                payload[key] = value;
            }
        }
        payload
    };
    match &request.kind {
        Kind::Event(event) => {
            let body = envelope(&to, &event_id(1), event.clone());
            workspace.add_event_message(body.as_bytes());
            // A person's message in the channel, for events about one (a reaction's item).
            workspace.add_message(json!({"channel": channel, "ts": message_ts, "user": user,
                "text": "a person's message"}));
            only(vec![one("the event", body, false)])
        }
        Kind::Message { text, mention } => {
            // It mentions the bot of the app it is for.
            let text = &text.replace(&format!("<@{BOT_USER}>"), &format!("<@{}>", to.bot_user));
            let message = |ts: &str| {
                let mut m = json!({
                    "type": "message", "user": user, "text": text, "channel": channel,
                    "ts": ts, "event_ts": ts,
                    "client_msg_id": format!("{}{:04}", &CLIENT_MSG_ID[..CLIENT_MSG_ID.len() - 4], n + 1),
                    "channel_type": if dm { "im" } else { "channel" },
                });
                if *mention {
                    m["type"] = "app_mention".into();
                    m.as_object_mut().map(|o| o.remove("channel_type"));
                }
                m
            };
            let first = envelope(&to, &event_id(1), message(&message_ts));
            workspace.add_event_message(first.as_bytes());
            let mut copies = vec![one(
                if *mention {
                    "its app_mention event"
                } else {
                    "its message event"
                },
                first,
                false,
            )];
            if request.copies && *mention {
                let mut m = message(&message_ts);
                m["type"] = "message".into();
                m["channel_type"] = "channel".into();
                copies.push(Copy {
                    offset: Duration::from_millis(40),
                    ..one("its message event", envelope(&to, &event_id(2), m), false)
                });
            }
            if request.copies && request.phantom {
                let phantom = envelope(&to, &event_id(3), {
                    let mut m = message(&phantom_ts);
                    m["type"] = "message".into();
                    m["channel_type"] = if dm { "im" } else { "channel" }.into();
                    m
                });
                workspace.add_event_message(phantom.as_bytes());
                copies.push(Copy {
                    offset: Duration::from_secs(21),
                    ..one(
                        "its phantom copy (another ts, the same client_msg_id)",
                        phantom,
                        false,
                    )
                });
            }
            Ok(Prepared {
                copies,
                phantom: Some((phantom_ts, message_ts)),
                execution: None,
            })
        }
        Kind::Command { command, text } => {
            let body = form_urlencoded::Serializer::new(String::new())
                .extend_pairs([
                    ("command", command.as_str()),
                    ("text", text.as_str()),
                    ("team_id", team),
                    ("api_app_id", app_id),
                    ("user_id", user),
                    ("channel_id", channel),
                    ("trigger_id", &trigger_id(now_ms, 1 + 10 * k)),
                    (
                        "response_url",
                        &format!("{origin}/commands/{team}/{channel}/{}", n + 1),
                    ),
                ])
                .finish();
            only(vec![one("the command", body, true)])
        }
        Kind::Click {
            action_id,
            value,
            on,
        } => {
            let action_ts = format!("{}.{:06}", now_ms / 1000, 200 + n);
            let mut button = json!({"type": "button", "action_id": action_id, "block_id": "b",
                                    "value": value, "action_ts": action_ts});
            let message = match on {
                On::Nothing => None,
                On::Text(text) => {
                    let posted = workspace.call(
                        "chat.postMessage",
                        &json!({"channel": channel, "text": text, "blocks": [
                            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
                            {"type": "actions", "elements": [{"type": "button", "action_id": action_id,
                                "text": {"type": "plain_text", "text": "Click"}, "value": value}]}
                        ]}),
                    );
                    Some(posted["message"].clone())
                }
                On::Posted => {
                    let ours = workspace.ours();
                    let found = ours.iter().rev().find_map(|m| {
                        (m["channel"] == channel)
                            .then(|| button_in(m, action_id).map(|b| (m.clone(), b)))
                            .flatten()
                    });
                    let Some((message, (block_id, element))) = found else {
                        return Err(format!(
                            "no message of this app's in {channel} has a button {action_id:?} \
                             to click"
                        ));
                    };
                    button["block_id"] = block_id.into();
                    if element["type"] == "feedback_buttons" {
                        // Feedback buttons: the value `negative` presses the negative one.
                        let which = match value.as_str() {
                            "negative" => "negative_button",
                            _ => "positive_button",
                        };
                        button["type"] = "feedback_buttons".into();
                        button["value"] = element[which]["value"].clone();
                    } else if let Some(v) = element.get("value") {
                        button["value"] = v.clone();
                    }
                    Some(message)
                }
            };
            let mut payload = json!({"type": "block_actions", "actions": [button]});
            if let Some(message) = message {
                let ts = message["ts"].as_str().unwrap_or_default().to_string();
                payload["container"] =
                    json!({"type": "message", "message_ts": ts, "channel_id": channel});
                payload["channel"] = json!({"id": channel});
                payload["message"] = message;
                payload["response_url"] =
                    format!("{origin}/actions/{team}/{channel}/{ts}/{}", n + 1).into();
            }
            send(workspace, "the click", interaction(payload))
        }
        Kind::Shortcut {
            callback_id,
            message,
        } => {
            let mut payload = json!({
                "type": if *message { "message_action" } else { "shortcut" },
                "callback_id": callback_id,
                "action_ts": format!("{}.{:06}", now_ms / 1000, 300 + n),
            });
            if *message {
                workspace.add_message(json!({"channel": channel, "ts": message_ts, "user": user,
                    "text": "a message to act on"}));
                payload["channel"] = json!({"id": channel});
                payload["message_ts"] = message_ts.clone().into();
                payload["message"] = json!({"type": "message", "ts": message_ts, "user": user, "text": "a message to act on"});
                payload["response_url"] =
                    format!("{origin}/actions/{team}/{channel}/{message_ts}/{}", n + 1).into();
            }
            only(vec![one("the shortcut", form(interaction(payload)), true)])
        }
        Kind::ViewSubmission {
            view,
            callback_id,
            values,
        } => {
            let mut shown = match view {
                Some(view) => {
                    let opened = workspace.call(
                        "views.open",
                        &json!({"trigger_id": trigger_id(now_ms, 9 + 10 * k), "view": view}),
                    );
                    match opened["view"].clone() {
                        Value::Null => view.clone(),
                        shown => shown,
                    }
                }
                None => workspace
                    .views()
                    .iter()
                    .rev()
                    .find(|v| v["callback_id"] == callback_id.as_str())
                    .cloned()
                    .ok_or_else(|| format!("the bot opened no view {callback_id:?} to submit"))?,
            };
            shown["state"] = json!({ "values": values });
            let payload = interaction(json!({"type": "view_submission", "view": shown}));
            send(workspace, "the view submission", payload)
        }
        Kind::StopSession => {
            let thread =
                streaming_in(workspace, channel).ok_or("no answer of the bot's streams to stop")?;
            let event = workspace.stop_session(channel, &thread, user);
            only(vec![one(
                "agent_session_stopped",
                envelope(&to, &event_id(1), event),
                false,
            )])
        }
        Kind::Step {
            callback_id,
            inputs,
        } => {
            let (id, workflow, token) =
                workspace
                    .executions
                    .start(callback_id, inputs.clone(), team);
            let ts = format!("{}.{:06}", now_ms / 1000, 400 + n);
            let event = json!({
                "type": "function_executed",
                "function": {"id": format!("Fn0EXPLORE{n}"), "callback_id": callback_id,
                             "title": callback_id, "type": "app", "app_id": app_id,
                             "input_parameters": [], "output_parameters": []},
                "inputs": inputs,
                "function_execution_id": id,
                "workflow_execution_id": workflow,
                "event_ts": ts,
                "bot_access_token": token,
            });
            Ok(Prepared {
                copies: vec![one(
                    "function_executed",
                    envelope(&to, &event_id(1), event),
                    false,
                )],
                phantom: None,
                execution: Some(id),
            })
        }
    }
}
