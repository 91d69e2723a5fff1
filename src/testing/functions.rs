//! Workflow Builder step executions as Slack keeps them, for the stand-ins ([`super::FakeSlack`];
//! and `slack-once standin` over HTTP): an execution is `running` until it is
//! completed (`functions.completeSuccess`), failed (`functions.completeError`) or ended (the
//! workflow stopped, the step timed out); each of its tokens (`xwfp-…`, one per request Slack
//! sends for it) acts as the app's bot in its team, expires 15 minutes after it is issued
//! (`token_expired`), and is revoked when the execution stops running (`token_revoked`). A
//! completion is checked in Slack's order: no token `not_authed`, an expired token
//! `token_expired`, an unknown execution `function_execution_not_found`, a token that is not
//! one of that execution's `access_denied`, an execution no longer running
//! `execution_not_in_running_state` (also with a token its end revoked), then the arguments
//! (`invalid_arguments`).

use std::collections::HashMap;

use serde_json::{Value, json};

/// How long an execution's token is good after it is issued (Slack: 15 minutes).
pub const WORKFLOW_TOKEN_MS: u64 = 15 * 60 * 1000;

/// One execution of a step, as the stand-in keeps it.
#[derive(Clone, Debug)]
pub(crate) struct Execution {
    pub id: String,
    pub workflow: String,
    pub callback_id: String,
    pub team: String,
    pub inputs: Value,
    /// `running`, `completed`, `failed` or `ended`.
    pub state: &'static str,
    pub outputs: Option<Value>,
    pub error: Option<String>,
    /// Completions answered ok (never more than one) and refused.
    pub completions: u32,
    pub refused: u32,
    /// The refusals' codes, in order.
    pub refusals: Vec<String>,
}

struct Token {
    execution: String,
    issued_ms: u64,
    revoked: bool,
}

/// The executions of one Slack.
#[derive(Default)]
pub(crate) struct Executions {
    list: Vec<Execution>,
    tokens: HashMap<String, Token>,
    minted: u64,
    /// How long a token is good after it is issued ([`WORKFLOW_TOKEN_MS`] unless set).
    token_ms: Option<u64>,
}

impl std::fmt::Debug for Executions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens.
        f.debug_struct("Executions")
            .field("executions", &self.list)
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

/// What a workflow token may do now.
pub(crate) enum Authenticated {
    /// It acts in this team.
    Team(String),
    /// Slack's refusal.
    Refused(&'static str),
}

impl Executions {
    /// An id or a token: the same ones in the same order in every stand-in (an exploration's
    /// schedules compare their executions' keys).
    fn mint(&mut self, prefix: &str, len: usize) -> String {
        use sha2::{Digest, Sha256};
        self.minted += 1;
        let digest = Sha256::new()
            .chain_update(prefix)
            .chain_update(self.minted.to_le_bytes())
            .finalize();
        let text: String = hex::encode(digest).to_uppercase();
        format!("{prefix}{}", &text[..len])
    }

    /// How long a token is good after it is issued.
    fn token_ms(&self) -> u64 {
        self.token_ms.unwrap_or(WORKFLOW_TOKEN_MS)
    }

    /// Tokens are good for `ms` after they are issued (Slack: [`WORKFLOW_TOKEN_MS`]).
    pub fn set_token_lifetime(&mut self, ms: u64) {
        self.token_ms = Some(ms);
    }

    /// A workflow reached the step `callback_id` in `team`: the execution's id, its workflow's,
    /// and its first token.
    pub fn start(
        &mut self,
        callback_id: &str,
        inputs: Value,
        team: &str,
    ) -> (String, String, String) {
        let id = self.mint("Fx", 10);
        let workflow = self.mint("Wx", 10);
        self.list.push(Execution {
            id: id.clone(),
            workflow: workflow.clone(),
            callback_id: callback_id.to_string(),
            team: team.to_string(),
            inputs,
            state: "running",
            outputs: None,
            error: None,
            completions: 0,
            refused: 0,
            refusals: Vec::new(),
        });
        let token = self.token(&id).expect("just started");
        (id, workflow, token)
    }

    /// A new token for the execution `id` (Slack sends one with each of its requests): born
    /// revoked when the execution no longer runs. `None` for an unknown execution.
    pub fn token(&mut self, id: &str) -> Option<String> {
        let running = self.find(id)?.state == "running";
        let token = format!("xwfp-{}", self.mint("", 24).to_lowercase());
        self.tokens.insert(
            token.clone(),
            Token {
                execution: id.to_string(),
                issued_ms: crate::clock::now_ms(),
                revoked: !running,
            },
        );
        Some(token)
    }

    /// The workflow stopped (or the step timed out): a running execution ends, its tokens
    /// revoked. `false` for an unknown execution.
    pub fn end(&mut self, id: &str) -> bool {
        let Some(e) = self.list.iter_mut().find(|e| e.id == id) else {
            return false;
        };
        if e.state == "running" {
            e.state = "ended";
            self.revoke_all(id);
        }
        true
    }

    fn revoke_all(&mut self, id: &str) {
        for t in self.tokens.values_mut().filter(|t| t.execution == id) {
            t.revoked = true;
        }
    }

    fn find(&self, id: &str) -> Option<&Execution> {
        self.list.iter().find(|e| e.id == id)
    }

    /// Every token issued, with its execution (for the explorer: none may reach the logs).
    #[cfg_attr(not(feature = "explore"), allow(dead_code))]
    pub fn issued(&self) -> Vec<(String, String)> {
        self.tokens
            .iter()
            .map(|(t, r)| (t.clone(), r.execution.clone()))
            .collect()
    }

    /// The newest execution, if any.
    #[cfg_attr(not(feature = "explore"), allow(dead_code))]
    pub fn newest(&self) -> Option<&Execution> {
        self.list.last()
    }

    /// Whether `token` is a workflow token (`xwfp-`).
    pub fn is_workflow_token(token: Option<&str>) -> bool {
        token.is_some_and(|t| t.starts_with("xwfp-"))
    }

    /// A call of any method but a completion with the workflow token `token`.
    pub fn authenticate(&self, token: &str) -> Authenticated {
        let Some(t) = self.tokens.get(token) else {
            return Authenticated::Refused("invalid_auth");
        };
        if crate::clock::now_ms() > t.issued_ms + self.token_ms() {
            return Authenticated::Refused("token_expired");
        }
        if t.revoked {
            return Authenticated::Refused("token_revoked");
        }
        match self.find(&t.execution) {
            Some(e) => Authenticated::Team(e.team.clone()),
            None => Authenticated::Refused("invalid_auth"),
        }
    }

    /// `functions.completeSuccess` / `functions.completeError`, answered as Slack does.
    pub fn complete(&mut self, method: &str, args: &Value, token: Option<&str>) -> Value {
        let refuse = |code: &str| json!({"ok": false, "error": code});
        let Some(token) = token else {
            return refuse("not_authed");
        };
        let now = crate::clock::now_ms();
        let presented = self.tokens.get(token);
        if presented.is_some_and(|t| now > t.issued_ms + self.token_ms()) {
            let id = args["function_execution_id"].as_str().unwrap_or_default();
            if let Some(e) = self.list.iter_mut().find(|e| e.id == id) {
                e.refused += 1;
                e.refusals.push("token_expired".into());
            }
            return refuse("token_expired");
        }
        let id = args["function_execution_id"].as_str().unwrap_or_default();
        let Some(index) = self.list.iter().position(|e| e.id == id) else {
            return refuse("function_execution_not_found");
        };
        let own = presented.is_some_and(|t| t.execution == id);
        let e = &mut self.list[index];
        let code = if !own {
            Some("access_denied")
        } else if e.state != "running" {
            Some("execution_not_in_running_state")
        } else {
            None
        };
        if let Some(code) = code {
            e.refused += 1;
            e.refusals.push(code.into());
            return refuse(code);
        }
        let outputs = match &args["outputs"] {
            Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
            other => other.clone(),
        };
        match method {
            "functions.completeSuccess" if outputs.is_object() => {
                e.state = "completed";
                e.outputs = Some(outputs);
            }
            "functions.completeError" if args["error"].as_str().is_some_and(|t| !t.is_empty()) => {
                e.state = "failed";
                e.error = args["error"].as_str().map(str::to_string);
            }
            _ => {
                e.refused += 1;
                e.refusals.push("invalid_arguments".into());
                return refuse("invalid_arguments");
            }
        }
        e.completions += 1;
        self.revoke_all(id);
        json!({"ok": true})
    }

    /// The executions as `/_standin/state` shows them, in the order they started.
    pub fn shown(&self) -> Vec<Value> {
        self.list
            .iter()
            .map(|e| {
                json!({
                    "function_execution_id": e.id,
                    "workflow_execution_id": e.workflow,
                    "callback_id": e.callback_id,
                    "team": e.team,
                    "inputs": e.inputs,
                    "state": e.state,
                    "outputs": e.outputs,
                    "error": e.error,
                    "completions": e.completions,
                    "refused": e.refused,
                    "refusals": e.refusals,
                })
            })
            .collect()
    }
}

/// A step's execution started in a stand-in ([`super::FakeSlack::start_execution`]).
#[derive(Clone, Debug)]
pub struct StartedExecution {
    /// The execution's id (`Fx…`).
    pub function_execution_id: String,
    /// The workflow run's id (`Wx…`).
    pub workflow_execution_id: String,
    /// The execution's first token (`xwfp-…`), for its `function_executed`.
    pub bot_access_token: String,
}
