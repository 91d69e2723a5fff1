//! Slack's side of OAuth, for stand-ins: codes a person's approval would make, `oauth.v2.access`
//! (a code, or a refresh token) and which workspace each token is good for.
//!
//! Token rotation as Slack does it (and as concurrent refreshes meet it, slackapi/node-slack-sdk
//! #2504): exchanging a refresh token `R` issues a new pair and revokes the pair issued from `R`
//! before (two exchanges of `R` are both answered; only the later pair works); once a token
//! issued from `R` is used (a call, or its own refresh), `R` is dead (`invalid_refresh_token`).
//! The access token issued beside `R` stays good until it expires.

use std::collections::HashMap;

use serde_json::{Value, json};

/// Access tokens live this long (Slack's 12 hours).
pub const TOKEN_LIFETIME_S: u64 = 43_200;

#[derive(Clone, Debug)]
struct Grant {
    team: Option<String>,
    enterprise: Option<String>,
    org_wide: bool,
    scope: String,
    user_scope: String,
    rotation: bool,
    spent: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Live,
    Revoked,
    /// A later exchange of its parent replaced it.
    Superseded,
}

#[derive(Clone, Debug)]
struct Issued {
    /// The installation it is for: a team, or an enterprise for an org-wide install.
    owner: String,
    refresh: bool,
    parent: Option<String>,
    state: State,
    expires_at_ms: Option<u64>,
}

/// One OAuth exchange, as a stand-in saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The `grant_type` asked for: `authorization_code` (also when none was given) or
    /// `refresh_token`.
    pub grant_type: String,
    /// The installation the tokens were issued for (a team, or an enterprise for an org-wide
    /// install); `None` when refused.
    pub owner: Option<String>,
    /// Whether tokens were issued.
    pub ok: bool,
}

/// The app's credentials, its grants and the tokens issued.
#[derive(Debug)]
pub struct OAuthGrants {
    client_id: String,
    client_secret: String,
    app_id: String,
    codes: HashMap<String, Grant>,
    tokens: HashMap<String, Issued>,
    /// The pair last issued from each refresh token.
    issued_from: HashMap<String, (String, String)>,
    exchanges: Vec<Exchange>,
    next: u64,
    lifetime_s: u64,
    /// The error the next exchange answers, whatever it asks.
    refuse_next: Option<String>,
}

/// The bot user a stand-in gives `owner`'s installation of the test app ([`super::APP_ID`]).
pub fn bot_user_of(owner: &str) -> String {
    format!("U{owner}BOT")
}

/// The bot id a stand-in gives `owner`'s installation of the test app ([`super::APP_ID`]).
pub fn bot_id_of(owner: &str) -> String {
    format!("B{owner}")
}

/// The bot user a stand-in gives `owner`'s installation of the app `app_id`: each app has a
/// bot user of its own in a workspace ([`bot_user_of`] for the test app).
pub fn bot_user_for(app_id: &str, owner: &str) -> String {
    match app_id == super::APP_ID {
        true => bot_user_of(owner),
        false => format!("U{owner}{app_id}"),
    }
}

/// The bot id a stand-in gives `owner`'s installation of the app `app_id` ([`bot_id_of`] for
/// the test app).
pub fn bot_id_for(app_id: &str, owner: &str) -> String {
    match app_id == super::APP_ID {
        true => bot_id_of(owner),
        false => format!("B{owner}{app_id}"),
    }
}

impl OAuthGrants {
    /// Slack's OAuth for the app `app_id` with the credentials `client_id` and `client_secret`: no
    /// grants yet, tokens living `TOKEN_LIFETIME_S`.
    pub fn new(client_id: &str, client_secret: &str, app_id: &str) -> Self {
        Self {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            app_id: app_id.into(),
            codes: HashMap::new(),
            tokens: HashMap::new(),
            issued_from: HashMap::new(),
            exchanges: Vec::new(),
            next: 0,
            lifetime_s: TOKEN_LIFETIME_S,
            refuse_next: None,
        }
    }

    /// The next exchange answers `{"ok": false, "error": code}` (Slack's answer as a page shows
    /// it, whatever it holds).
    pub fn refuse_next(&mut self, code: &str) {
        self.refuse_next = Some(code.to_string());
    }

    /// The app's client id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// Tokens issued from now on live `seconds`.
    pub fn set_lifetime(&mut self, seconds: u64) {
        self.lifetime_s = seconds;
    }

    /// A new token or code: each names its app, as no two apps' tokens are alike in Slack (a
    /// token one app's stand-in issued is refused by another's).
    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!(
            "{prefix}-{}-{}-{:08x}",
            self.app_id,
            self.next,
            rand_u32(self.next)
        )
    }

    /// Takes `token` as a bot token of `owner`'s installation issued outside the install flow
    /// (a single workspace's token, kept with `import-token`): Slack refuses any other token
    /// it never issued.
    pub fn accept(&mut self, token: &str, owner: &str) {
        self.tokens.insert(
            token.to_string(),
            Issued {
                owner: owner.into(),
                refresh: false,
                parent: None,
                state: State::Live,
                expires_at_ms: None,
            },
        );
    }

    /// A person approved the install in `team` with `scope` (and `user_scope`): the code
    /// Slack sends to the redirect. `rotation`: tokens expire and come with refresh tokens.
    pub fn grant(&mut self, team: &str, scope: &str, user_scope: &str, rotation: bool) -> String {
        let code = self.fresh("code");
        self.codes.insert(
            code.clone(),
            Grant {
                team: Some(team.into()),
                enterprise: None,
                org_wide: false,
                scope: scope.into(),
                user_scope: user_scope.into(),
                rotation,
                spent: false,
            },
        );
        code
    }

    /// An org-wide install in `enterprise`.
    pub fn grant_org(&mut self, enterprise: &str, scope: &str, rotation: bool) -> String {
        let code = self.fresh("code");
        self.codes.insert(
            code.clone(),
            Grant {
                team: None,
                enterprise: Some(enterprise.into()),
                org_wide: true,
                scope: scope.into(),
                user_scope: String::new(),
                rotation,
                spent: false,
            },
        );
        code
    }

    /// Every exchange, in order.
    pub fn exchanges(&self) -> &[Exchange] {
        &self.exchanges
    }

    /// Whether `token` was issued here.
    pub fn issued(&self, token: &str) -> bool {
        self.tokens.contains_key(token)
    }

    /// The live access tokens of `owner` (a team or an enterprise).
    pub fn live_tokens(&self, owner: &str) -> Vec<String> {
        self.tokens
            .iter()
            .filter(|(_, t)| t.owner == owner && !t.refresh && t.state == State::Live)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Every access token issued to `owner`, live or not.
    pub fn tokens_of(&self, owner: &str) -> Vec<String> {
        self.tokens
            .iter()
            .filter(|(_, t)| t.owner == owner && !t.refresh)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Every token issued to `owner` (access and refresh), for checks that none leaks.
    pub fn secrets_of(&self, owner: &str) -> Vec<String> {
        self.tokens
            .iter()
            .filter(|(_, t)| t.owner == owner)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Whether the access token `token` would be taken now (without counting as a use).
    pub fn is_live(&self, token: &str, now_ms: u64) -> bool {
        self.tokens.get(token).is_some_and(|t| {
            !t.refresh && t.state == State::Live && t.expires_at_ms.is_none_or(|e| e > now_ms)
        })
    }

    /// Whether the refresh token `token` can still be exchanged.
    pub fn refresh_is_live(&self, token: &str) -> bool {
        self.tokens
            .get(token)
            .is_some_and(|t| t.refresh && t.state == State::Live)
    }

    /// Revokes the token `token` (a person removed it: `token_revoked` from then on); `false`
    /// when it was never issued here.
    pub fn revoke(&mut self, token: &str) -> bool {
        match self.tokens.get_mut(token) {
            Some(t) => {
                t.state = State::Revoked;
                true
            }
            None => false,
        }
    }

    /// Revokes every token of `owner` (the app uninstalled there).
    pub fn revoke_all(&mut self, owner: &str) {
        for t in self.tokens.values_mut().filter(|t| t.owner == owner) {
            t.state = State::Revoked;
        }
    }

    /// Which installation `token` is good for, now (`now_ms`): `Err` with Slack's code when it
    /// is not. A use of a token issued from a refresh token kills that refresh token.
    pub fn check(&mut self, token: &str, now_ms: u64) -> Result<String, &'static str> {
        let Some(t) = self.tokens.get(token) else {
            return Err("invalid_auth");
        };
        if t.refresh {
            return Err("invalid_auth");
        }
        match t.state {
            State::Revoked => return Err("token_revoked"),
            State::Superseded => return Err("invalid_auth"),
            State::Live => {}
        }
        if t.expires_at_ms.is_some_and(|e| e <= now_ms) {
            return Err("token_expired");
        }
        let owner = t.owner.clone();
        self.used(token);
        Ok(owner)
    }

    fn used(&mut self, token: &str) {
        if let Some(parent) = self.tokens.get(token).and_then(|t| t.parent.clone())
            && let Some(p) = self.tokens.get_mut(&parent)
        {
            p.state = State::Revoked;
        }
    }

    fn issue(
        &mut self,
        owner: &str,
        prefix: &str,
        rotation: bool,
        parent: Option<&str>,
        now_ms: u64,
    ) -> (String, Option<String>) {
        let access = self.fresh(prefix);
        let expires = rotation.then(|| now_ms + self.lifetime_s * 1000);
        self.tokens.insert(
            access.clone(),
            Issued {
                owner: owner.into(),
                refresh: false,
                parent: parent.map(str::to_string),
                state: State::Live,
                expires_at_ms: expires,
            },
        );
        let refresh = rotation.then(|| {
            let refresh = self.fresh("xoxe-1");
            self.tokens.insert(
                refresh.clone(),
                Issued {
                    owner: owner.into(),
                    refresh: true,
                    parent: parent.map(str::to_string),
                    state: State::Live,
                    expires_at_ms: None,
                },
            );
            refresh
        });
        (access, refresh)
    }

    /// `oauth.v2.access` with `args` (a form as a JSON object of strings), at `now_ms`.
    pub fn exchange(&mut self, args: &Value, now_ms: u64) -> Value {
        let text = |k: &str| args[k].as_str().unwrap_or_default().to_string();
        let grant_type = match text("grant_type").as_str() {
            "" => "authorization_code".to_string(),
            other => other.to_string(),
        };
        let log = |s: &mut Self, owner: Option<String>, ok: bool| {
            s.exchanges.push(Exchange {
                grant_type: grant_type.clone(),
                owner,
                ok,
            })
        };
        if let Some(code) = self.refuse_next.take() {
            log(self, None, false);
            return json!({"ok": false, "error": code});
        }
        if text("client_id") != self.client_id {
            log(self, None, false);
            return json!({"ok": false, "error": "invalid_client_id"});
        }
        if text("client_secret") != self.client_secret {
            log(self, None, false);
            return json!({"ok": false, "error": "bad_client_secret"});
        }
        if grant_type == "refresh_token" {
            let r = text("refresh_token");
            let alive = self
                .tokens
                .get(&r)
                .filter(|t| t.refresh && t.state == State::Live)
                .cloned();
            let Some(parent) = alive else {
                log(self, None, false);
                return json!({"ok": false, "error": "invalid_refresh_token"});
            };
            // Its own refresh is a use of a token issued from its parent.
            self.used(&r);
            if let Some((a, b)) = self.issued_from.remove(&r) {
                for t in [a, b] {
                    if let Some(t) = self.tokens.get_mut(&t)
                        && t.state == State::Live
                    {
                        t.state = State::Superseded;
                    }
                }
            }
            let (access, refresh) =
                self.issue(&parent.owner, "xoxe.xoxb-1", true, Some(&r), now_ms);
            let refresh = refresh.expect("a rotating pair");
            self.issued_from
                .insert(r.clone(), (access.clone(), refresh.clone()));
            log(self, Some(parent.owner.clone()), true);
            return json!({
                "ok": true, "token_type": "bot", "access_token": access,
                "refresh_token": refresh, "expires_in": self.lifetime_s,
            });
        }
        let code = text("code");
        let grant = match self.codes.get_mut(&code) {
            Some(g) if !g.spent => {
                g.spent = true;
                g.clone()
            }
            _ => {
                log(self, None, false);
                return json!({"ok": false, "error": "invalid_code"});
            }
        };
        let owner = match (&grant.team, &grant.enterprise) {
            (Some(t), _) if !grant.org_wide => t.clone(),
            (_, Some(e)) => e.clone(),
            _ => unreachable!("a grant names its installation"),
        };
        let prefix = if grant.rotation {
            "xoxe.xoxb-1"
        } else {
            "xoxb"
        };
        let (access, refresh) = self.issue(&owner, prefix, grant.rotation, None, now_ms);
        let mut answer = json!({
            "ok": true, "token_type": "bot", "access_token": access, "scope": grant.scope,
            "bot_user_id": bot_user_for(&self.app_id, &owner), "app_id": self.app_id,
            "team": grant.team.as_ref().filter(|_| !grant.org_wide).map(|t| json!({"id": t, "name": format!("Team {t}")})),
            "enterprise": grant.enterprise.as_ref().map(|e| json!({"id": e, "name": format!("Enterprise {e}")})),
            "is_enterprise_install": grant.org_wide,
            "authed_user": {"id": "U0INSTALLER", "scope": grant.user_scope},
        });
        if let Some(refresh) = refresh {
            answer["refresh_token"] = json!(refresh);
            answer["expires_in"] = json!(self.lifetime_s);
        }
        if !grant.user_scope.is_empty() {
            let (user, _) = self.issue(&owner, "xoxp", false, None, now_ms);
            answer["authed_user"]["access_token"] = json!(user);
            answer["authed_user"]["token_type"] = json!("user");
        }
        log(self, Some(owner), true);
        answer
    }
}

/// A few bits that differ per token (the tokens need not be secret here, only distinct).
fn rand_u32(n: u64) -> u32 {
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    (x as u32) ^ 0x5bd1_e995
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refresh(g: &mut OAuthGrants, r: &str) -> Value {
        g.exchange(
            &json!({"client_id": "C", "client_secret": "S", "grant_type": "refresh_token", "refresh_token": r}),
            0,
        )
    }

    #[test]
    fn two_exchanges_of_one_refresh_token_leave_one_working_token() {
        let mut g = OAuthGrants::new("C", "S", "A1");
        let code = g.grant("T2", "chat:write", "", true);
        let first = g.exchange(
            &json!({"client_id": "C", "client_secret": "S", "code": code}),
            0,
        );
        assert_eq!(
            g.exchange(
                &json!({"client_id": "C", "client_secret": "S", "code": code}),
                0
            )["error"],
            "invalid_code"
        );
        let r = first["refresh_token"].as_str().unwrap().to_string();
        let a = refresh(&mut g, &r);
        let b = refresh(&mut g, &r);
        let (a, b) = (
            a["access_token"].as_str().unwrap(),
            b["access_token"].as_str().unwrap(),
        );
        assert_eq!(g.check(a, 1), Err("invalid_auth"));
        assert_eq!(g.check(b, 1).as_deref(), Ok("T2"));
        // b was used: r is dead.
        assert_eq!(refresh(&mut g, &r)["error"], "invalid_refresh_token");
        // The first access token lasts until it expires.
        let old = first["access_token"].as_str().unwrap();
        assert_eq!(g.check(old, 1).as_deref(), Ok("T2"));
        assert_eq!(g.check(old, TOKEN_LIFETIME_S * 1000), Err("token_expired"));
    }
}
