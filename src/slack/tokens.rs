//! Where a client's bot token comes from: the process's secrets, a workspace's installation,
//! or a Workflow Builder step execution's own token.

use tokio::time::Instant;

use super::SlackError;
use crate::config::Secret;
use crate::secrets::{Refused, SlackSecrets};

/// Where a client's bot token comes from: the process's secrets (one workspace), or a
/// workspace's installation (multi-workspace mode: `workspaces`).
#[async_trait::async_trait]
pub trait TokenSource: Send + Sync {
    /// The token to call with now (`None`: none is known).
    fn current(&self) -> Option<Secret>;
    /// Slack refused `used`, sent at `sent_at`: whether another token is to be had.
    async fn refused(&self, used: &Secret, sent_at: Instant) -> Refused;
    /// Called before each call: a token about to expire is renewed first (within `deadline`).
    async fn prepare(&self, _deadline: Instant) {}
    /// Waits, within `deadline`, for the right to read one page of history with `method` (a
    /// distributed app's limit, per workspace and method); `Err` when none comes in time.
    async fn lookup_slot(&self, _method: &str, _deadline: Instant) -> Result<(), SlackError> {
        Ok(())
    }
    /// The installation whose token this is (multi-workspace mode): its workspace's team id
    /// (`T…`), or its enterprise's id (`E…`) for an org-wide install. `None`: the process's
    /// one token (single-workspace mode).
    fn installation(&self) -> Option<&str> {
        None
    }
    /// Whether a refusal of this source's token stands for good for the request (nothing can
    /// renew it: a step execution's token).
    fn refusals_are_final(&self) -> bool {
        false
    }
}

#[async_trait::async_trait]
impl TokenSource for SlackSecrets {
    fn current(&self) -> Option<Secret> {
        SlackSecrets::current(self).bot_token.clone()
    }

    async fn refused(&self, used: &Secret, sent_at: Instant) -> Refused {
        self.token_refused(used, sent_at).await
    }
}

/// A Workflow Builder step execution's own token (`bot_access_token`, `xwfp-…`), which the
/// request that carries it uses for every call, in place of the installation's: nothing else
/// can renew it, so a refusal stands. The installation (the tenant) stays the one the request
/// is answered for.
pub(super) struct ExecutionToken {
    pub(super) token: Secret,
    pub(super) installation: Option<String>,
}

#[async_trait::async_trait]
impl TokenSource for ExecutionToken {
    fn current(&self) -> Option<Secret> {
        Some(self.token.clone())
    }

    async fn refused(&self, _used: &Secret, _sent_at: Instant) -> Refused {
        Refused::Confirmed
    }

    fn installation(&self) -> Option<&str> {
        self.installation.as_deref()
    }

    fn refusals_are_final(&self) -> bool {
        true
    }
}
