//! The app manifest an [`App`] needs, from its registrations ([`App::manifest`], and the tool
//! `manifest` of every bot's binary): the events its listeners take, its commands, shortcuts
//! and interactivity, its Workflow Builder steps with their parameters, and the bot scopes
//! these imply, beside what the author describes ([`Manifest`]: the app's name, the commands'
//! descriptions, message events, further scopes).
//!
//! What each registration implies:
//!
//! | registration | events | scopes |
//! |---|---|---|
//! | every app | `app_uninstalled`, `tokens_revoked` (a distributed app forgets an installation) | `chat:write` |
//! | `app_mention` | `app_mention` | `app_mentions:read` |
//! | `message`, `message_where` | `message.channels`, `message.groups`, `message.im`, `message.mpim` unless [`Manifest::message_events`] names which | each one's `…:history` |
//! | `reaction_added` / `_removed` | the same | `reactions:read` |
//! | `member_joined_channel`, `channel_created` | the same | `channels:read` (and `groups:read`) |
//! | `team_join` | `team_join` | `users:read` |
//! | `app_home_opened` | `app_home_opened` | — |
//! | the assistant's listeners | theirs, and `message.im` | `assistant:write`, `im:history` |
//! | `event(kind)` | `kind` | — (add them: [`Manifest::scopes`]) |
//! | `command` | — (a `slash_commands` entry) | `commands` |
//! | `shortcut`, `message_shortcut` | — (a `shortcuts` entry) | `commands` |
//! | actions, views, options | — (interactivity; options its `message_menu_options_url`) | — |
//! | `function` | `function_executed` (a `functions` entry; `org_deploy_enabled`, `function_runtime: remote`) | — |

use serde_json::{Map, Value, json};

use super::App;
use super::interactive::Declares;

/// Where the manifest points Slack until the deploy's URL replaces it (`sam deploy` prints it
/// as the output `SlackRequestUrl`).
pub const PLACEHOLDER_URL: &str = "https://REPLACE-WITH-THE-SlackRequestUrl-OUTPUT/slack/events";

/// A slash command as the manifest describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CommandText {
    command: String,
    description: String,
    usage_hint: Option<String>,
    should_escape: bool,
}

/// What the author says of the app beyond its registrations: its name and description, each
/// command's description, each shortcut's name, which message events its message listeners
/// take, and further scopes and events.
///
/// ```
/// use slack_once::app::manifest::Manifest;
/// use slack_once::app::{App, Ctx, Command};
///
/// let app = App::new()
///     .command("/standup", |_ctx: Ctx, _c: Command| async { Ok(()) })
///     .with_manifest(
///         Manifest::new("standup-bot")
///             .description("Runs the team's standups")
///             .command("/standup", "Starts today's standup", Some("[team]"), false),
///     );
/// let manifest = app.manifest();
/// assert_eq!(manifest["features"]["slash_commands"][0]["description"], "Starts today's standup");
/// assert!(manifest["oauth_config"]["scopes"]["bot"].as_array().unwrap().contains(&"commands".into()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    name: String,
    description: Option<String>,
    background_color: Option<String>,
    request_url: String,
    commands: Vec<CommandText>,
    shortcuts: Vec<(String, String, String)>,
    message_events: Option<Vec<String>>,
    events: Vec<String>,
    scopes: Vec<String>,
    home_tab: bool,
    /// The agent view (`features.agent_view`): its description and suggested prompts.
    agent: Option<(String, Vec<(String, String)>)>,
}

impl Default for Manifest {
    fn default() -> Self {
        Self::new("slack-once-bot")
    }
}

impl Manifest {
    /// The app named `name` (its display name and its bot user's).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
            background_color: None,
            request_url: PLACEHOLDER_URL.to_string(),
            commands: Vec::new(),
            shortcuts: Vec::new(),
            message_events: None,
            events: Vec::new(),
            scopes: Vec::new(),
            home_tab: false,
            agent: None,
        }
    }

    /// The app's description, as Slack shows it.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// The app's background colour (`#2c2d30`).
    pub fn background_color(mut self, color: impl Into<String>) -> Self {
        self.background_color = Some(color.into());
        self
    }

    /// The Request URL (default [`PLACEHOLDER_URL`]).
    pub fn request_url(mut self, url: impl Into<String>) -> Self {
        self.request_url = url.into();
        self
    }

    /// The slash command `command`'s description, usage hint and `should_escape` (`true`:
    /// mentions arrive as ids, `<@U…|name>`).
    pub fn command(
        mut self,
        command: &str,
        description: &str,
        usage_hint: Option<&str>,
        should_escape: bool,
    ) -> Self {
        self.commands.push(CommandText {
            command: format!("/{}", command.trim_start_matches('/')),
            description: description.into(),
            usage_hint: usage_hint.map(str::to_string),
            should_escape,
        });
        self
    }

    /// The shortcut `callback_id`'s name and description.
    pub fn shortcut(mut self, callback_id: &str, name: &str, description: &str) -> Self {
        self.shortcuts
            .push((callback_id.into(), name.into(), description.into()));
        self
    }

    /// The message events the app's message listeners take (`message.im`,
    /// `message.channels`, `message.groups`, `message.mpim`): by default all four.
    pub fn message_events<I, S>(mut self, events: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.message_events = Some(events.into_iter().map(Into::into).collect());
        self
    }

    /// Further bot events (those of `Listener::event` listeners are there already), with the
    /// scopes they imply as a listener's would (`app_mention` for a `message_where` listener
    /// that takes mentions: `app_mentions:read`).
    pub fn events<I, S>(mut self, events: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.events.extend(events.into_iter().map(Into::into));
        self
    }

    /// Further bot scopes: those the bot's calls need beyond what its registrations imply
    /// (`reactions:write` for `ctx.react`, `im:write` for a DM opened by user id, `users:read`
    /// for `ctx.user_info`, the history scopes for look-ups in conversations it posts to).
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes.extend(scopes.into_iter().map(Into::into));
        self
    }

    /// The Home tab (for `app_home_opened` listeners that publish a view).
    pub fn home_tab(mut self) -> Self {
        self.home_tab = true;
        self
    }

    /// An agent-view app (`features.agent_view`, Slack's agent messaging experience, the only
    /// one for new apps since 2026-06-30): `description` (at most 300 characters) and the
    /// Messages tab's suggested prompts, (title, message) each, at most 4. The assistant
    /// listeners then subscribe to the agent view's events: `app_home_opened` (the Messages
    /// tab) for [`crate::app::App::assistant_thread_started`], `app_context_changed` for
    /// [`crate::app::App::assistant_thread_context_changed`].
    ///
    /// ```
    /// use slack_once::app::{App, AssistantThread, Ctx, MessageEvent};
    /// use slack_once::app::manifest::Manifest;
    ///
    /// let app = App::new()
    ///     .assistant_thread_started(|_ctx: Ctx, _t: AssistantThread| async move { Ok(()) })
    ///     .assistant_message(|_ctx: Ctx, _q: MessageEvent| async move { Ok(()) })
    ///     .with_manifest(Manifest::new("helper").agent("Answers questions", &[("Hi", "Hello")]));
    /// let manifest = app.manifest();
    /// assert_eq!(manifest["features"]["agent_view"]["agent_description"], "Answers questions");
    /// let events = manifest["settings"]["event_subscriptions"]["bot_events"].to_string();
    /// assert!(events.contains("app_home_opened") && !events.contains("assistant_thread_started"));
    /// ```
    pub fn agent(mut self, description: impl Into<String>, prompts: &[(&str, &str)]) -> Self {
        let description: String = description.into().chars().take(300).collect();
        let prompts = prompts
            .iter()
            .take(4)
            .map(|(t, m)| (t.to_string(), m.to_string()))
            .collect();
        self.agent = Some((description, prompts));
        self
    }
}

fn push(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|i| i == item) {
        list.push(item.to_string());
    }
}

const MESSAGE_EVENTS: [&str; 4] = [
    "message.channels",
    "message.groups",
    "message.im",
    "message.mpim",
];

fn history_scope(event: &str) -> Option<&'static str> {
    Some(match event {
        "message.channels" => "channels:history",
        "message.groups" => "groups:history",
        "message.im" => "im:history",
        "message.mpim" => "mpim:history",
        _ => return None,
    })
}

/// The manifest `app` needs, as described by `m`.
pub(crate) fn of(app: &App, m: &Manifest) -> Value {
    let mut events: Vec<String> = Vec::new();
    let mut scopes: Vec<String> = Vec::new();
    let messages = m
        .message_events
        .clone()
        .unwrap_or_else(|| MESSAGE_EVENTS.iter().map(|e| e.to_string()).collect());
    let always = ["app_uninstalled".to_string(), "tokens_revoked".to_string()];
    let named: Vec<String> = app
        .listeners
        .iter()
        .flat_map(|l| l.events.iter())
        .chain(m.events.iter())
        .chain(always.iter())
        .cloned()
        .collect();
    for event in &named {
        subscribe(event, m, &messages, &mut events, &mut scopes);
    }
    push(&mut scopes, "chat:write");
    for e in &events {
        if let Some(scope) = history_scope(e) {
            push(&mut scopes, scope);
        }
    }
    let Interactive {
        commands,
        shortcuts,
        interactivity,
        options,
    } = interactive_of(app, m, &mut scopes);
    for s in &m.scopes {
        push(&mut scopes, s);
    }
    let functions = app.functions();
    // Sets, in one order whatever the registrations' order.
    events.sort();
    scopes.sort();

    let mut display = json!({"name": m.name});
    if let Some(d) = &m.description {
        display["description"] = d.clone().into();
    }
    if let Some(c) = &m.background_color {
        display["background_color"] = c.clone().into();
    }
    let features = features_of(m, &events, commands, shortcuts);
    let mut settings = json!({
        "event_subscriptions": {"request_url": m.request_url, "bot_events": events},
        "org_deploy_enabled": !functions.is_empty(),
        "socket_mode_enabled": false,
        "token_rotation_enabled": false,
    });
    if interactivity {
        settings["interactivity"] = json!({"is_enabled": true, "request_url": m.request_url});
        if options {
            settings["interactivity"]["message_menu_options_url"] = m.request_url.clone().into();
        }
    }
    if !functions.is_empty() {
        settings["function_runtime"] = "remote".into();
    }
    let mut manifest = json!({
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": display,
        "features": features,
        "oauth_config": {"scopes": {"bot": scopes}},
        "settings": settings,
    });
    if !functions.is_empty() {
        let mut map = Map::new();
        for f in functions.iter() {
            map.insert(f.callback_id().to_string(), f.manifest());
        }
        manifest["functions"] = Value::Object(map);
    }
    manifest
}

/// The bot events `event` subscribes to, with the scopes they need.
fn subscribe(
    event: &str,
    m: &Manifest,
    messages: &[String],
    events: &mut Vec<String>,
    scopes: &mut Vec<String>,
) {
    match event {
        "message" => {
            for e in messages {
                push(events, e);
            }
        }
        "app_mention" => {
            push(events, "app_mention");
            push(scopes, "app_mentions:read");
        }
        "assistant_thread_started" | "assistant_thread_context_changed" => {
            // The agent view has no assistant threads: the Messages tab's opening and
            // the person's context take their place.
            let agent_event = match event {
                "assistant_thread_started" => "app_home_opened",
                _ => "app_context_changed",
            };
            push(
                events,
                if m.agent.is_some() {
                    agent_event
                } else {
                    event
                },
            );
            push(events, "message.im");
            push(scopes, "assistant:write");
        }
        "app_context_changed" | "agent_session_stopped" | "agent_session_title_changed" => {
            push(events, event);
            push(scopes, "assistant:write");
        }
        "reaction_added" | "reaction_removed" => {
            push(events, event);
            push(scopes, "reactions:read");
        }
        "member_joined_channel" => {
            push(events, event);
            push(scopes, "channels:read");
            push(scopes, "groups:read");
        }
        "channel_created" => {
            push(events, event);
            push(scopes, "channels:read");
        }
        "team_join" => {
            push(events, event);
            push(scopes, "users:read");
        }
        other => push(events, other),
    }
}

/// What the interactive listeners declare: slash commands, shortcuts, and whether
/// interactivity (and its options URL) is on.
struct Interactive {
    commands: Vec<Value>,
    shortcuts: Vec<Value>,
    interactivity: bool,
    options: bool,
}

/// The interactive listeners' declarations, with the scopes they need.
fn interactive_of(app: &App, m: &Manifest, scopes: &mut Vec<String>) -> Interactive {
    let mut commands = Vec::new();
    let mut shortcuts = Vec::new();
    let (mut interactivity, mut options) = (false, false);
    for listener in &app.interactive {
        match &listener.declares {
            Declares::Command(name) => {
                push(scopes, "commands");
                let described = m.commands.iter().find(|c| &c.command == name);
                let mut c = json!({
                    "command": name,
                    "url": m.request_url,
                    "description": described
                        .map(|c| c.description.clone())
                        .unwrap_or_else(|| format!("Runs {name}")),
                    "should_escape": described.is_some_and(|c| c.should_escape),
                });
                if let Some(hint) = described.and_then(|c| c.usage_hint.clone()) {
                    c["usage_hint"] = hint.into();
                }
                commands.push(c);
            }
            Declares::Shortcut(id, message) => {
                push(scopes, "commands");
                interactivity = true;
                if let Some(id) = id {
                    let described = m.shortcuts.iter().find(|s| &s.0 == id);
                    shortcuts.push(json!({
                        "name": described.map(|s| s.1.clone()).unwrap_or_else(|| id.clone()),
                        "type": if *message { "message" } else { "global" },
                        "callback_id": id,
                        "description": described.map(|s| s.2.clone()).unwrap_or_else(|| id.clone()),
                    }));
                }
            }
            Declares::Interactivity => interactivity = true,
            Declares::Options => {
                interactivity = true;
                options = true;
            }
        }
    }
    Interactive {
        commands,
        shortcuts,
        interactivity,
        options,
    }
}

/// The manifest's features: the bot user, the app home, the agent view, commands and
/// shortcuts.
fn features_of(
    m: &Manifest,
    events: &[String],
    commands: Vec<Value>,
    shortcuts: Vec<Value>,
) -> Value {
    let mut features = json!({
        "bot_user": {"display_name": m.name, "always_online": true},
    });
    let messages_tab = events.iter().any(|e| e == "message.im");
    if messages_tab || m.home_tab {
        features["app_home"] = json!({
            "home_tab_enabled": m.home_tab,
            "messages_tab_enabled": messages_tab,
            "messages_tab_read_only_enabled": false,
        });
    }
    if let Some((description, prompts)) = &m.agent {
        let prompts: Vec<Value> = prompts
            .iter()
            .map(|(t, msg)| json!({"title": t, "message": msg}))
            .collect();
        features["agent_view"] = json!({"agent_description": description});
        if !prompts.is_empty() {
            features["agent_view"]["suggested_prompts"] = prompts.into();
        }
    }
    if !commands.is_empty() {
        features["slash_commands"] = commands.into();
    }
    if !shortcuts.is_empty() {
        features["shortcuts"] = shortcuts.into();
    }
    features
}

/// Where two manifests differ: each path whose values differ, with both (`None`: the same).
pub fn differences(expected: &Value, found: &Value) -> Vec<String> {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let (va, vb) = (
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    );
                    walk(&format!("{path}.{k}"), va, vb, out);
                }
            }
            _ if a != b => out.push(format!("{path}: the code says {a}, the file says {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", expected, found, &mut out);
    out
}
