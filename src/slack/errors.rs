//! Slack's error taxonomy: why a call failed, whether any retry can fix it, whether it may
//! have taken effect all the same, and whether Slack refused the token itself.

use std::time::Duration;

use http::StatusCode;

/// chat.postMessage's documented errors that no retry can fix: the event ends `failed`.
/// (`ratelimited`, `request_timeout`, `service_unavailable`, `team_added_to_org`,
/// `internal_error`, `fatal_error` and codes not listed here are treated as transient.)
pub const PERMANENT_POST_ERRORS: &[&str] = &[
    "access_denied",
    "account_inactive",
    "as_user_not_supported",
    "cannot_reply_to_message",
    "channel_not_found",
    "deprecated_endpoint",
    "duplicate_channel_not_found",
    "duplicate_message_not_found",
    "ekm_access_denied",
    "enterprise_is_restricted",
    "invalid_arg_name",
    "invalid_arguments",
    "invalid_array_arg",
    "invalid_auth",
    "invalid_blocks",
    "invalid_blocks_format",
    "invalid_charset",
    "invalid_form_data",
    "invalid_metadata_format",
    "invalid_metadata_schema",
    "invalid_post_type",
    "is_archived",
    "messages_tab_disabled",
    "metadata_must_be_sent_from_app",
    "metadata_too_large",
    "method_deprecated",
    "missing_post_type",
    // A stream outside a DM without whom it is for (`chat.startStream`).
    "missing_recipient_team_id",
    "missing_recipient_user_id",
    "missing_scope",
    "msg_blocks_too_long",
    "msg_too_long",
    "no_permission",
    "no_text",
    "not_allowed_token_type",
    "not_authed",
    "not_in_channel",
    "restricted_action",
    "restricted_action_non_threadable_channel",
    "restricted_action_read_only_channel",
    "restricted_action_thread_locked",
    "restricted_action_thread_only_channel",
    "slack_connect_canvas_sharing_blocked",
    "slack_connect_file_link_sharing_blocked",
    "slack_connect_lists_sharing_blocked",
    "team_access_not_granted",
    "token_expired",
    "token_revoked",
    "too_many_attachments",
    "too_many_contact_cards",
    "two_factor_setup_required",
];

/// The errors of an interaction's follow-ups that no retry can fix: a `trigger_id` spent or
/// expired (`views.open` / `views.push`), a view too large, a `response_url` used up, expired,
/// or refused here because it is not Slack's (`response_url_refused`), a request without one.
/// Only codes no other method answers: generic ones (`not_found`, `hash_conflict`,
/// `message_not_found`) stay transient for every method, as before.
pub const PERMANENT_INTERACTION_ERRORS: &[&str] = &[
    "expired_trigger_id",
    "exchanged_trigger_id",
    "invalid_trigger_id",
    "view_too_large",
    "used_url",
    "expired_url",
    "response_url_refused",
    "no_response_url",
];

/// A step completion's errors no retry fixes: the execution ended, is unknown, or the outputs
/// were refused (`functions.completeSuccess`, `functions.completeError`).
pub const PERMANENT_STEP_ERRORS: &[&str] = &[
    "execution_not_in_running_state",
    "function_execution_not_found",
    "parameter_validation_failed",
    "access_denied",
];

/// Why a Slack call failed; [`SlackError::may_have_posted`] says whether it may have taken
/// effect all the same.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    /// Slack answered `ok: false`; the code is Slack's (`channel_not_found`, `internal_error`…).
    #[error("Slack answered ok:false with {code}")]
    Api {
        /// Slack's error code.
        code: String,
    },
    /// Rate limited, and waiting `retry_after` would pass the deadline.
    #[error(
        "Slack rate-limited the post (Retry-After {retry_after:?}) and the deadline leaves no time to wait"
    )]
    RateLimited {
        /// How long Slack asked to wait (`Retry-After`, or 1 s without a usable one).
        retry_after: Duration,
    },
    /// Slack answered a non-2xx HTTP status (other than 429) without an error code.
    #[error("Slack answered HTTP {status}")]
    Status {
        /// The HTTP status.
        status: StatusCode,
    },
    /// The request failed on its connection: when connecting (nothing was made), or later (it
    /// may have been).
    #[error("the request to Slack failed")]
    Transport(#[source] hyper_util::client::legacy::Error),
    /// No whole answer came before the deadline: the call may have been made.
    #[error("Slack did not answer before the deadline")]
    Timeout,
    /// The deadline had passed before the request was sent: certainly not made.
    #[error("the deadline passed before the request to Slack was sent")]
    NotSent,
    /// Slack's answer could not be read or used (too large, not the JSON expected, a field
    /// missing, a look-up that cannot go on).
    #[error("Slack's answer could not be read")]
    InvalidResponse(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Slack refused the bot token (`code`), and the secret, read again, did not settle it (it
    /// could not be read, or it still holds that token for the first time): a later delivery
    /// tries again.
    #[error("Slack refused the bot token ({code}) and the secret held no other one yet")]
    TokenUnconfirmed {
        /// Slack's error code for the token (`invalid_auth`, `token_revoked`…).
        code: String,
    },
    /// Slack refused a token nothing can renew (a Workflow Builder step execution's own, which
    /// Slack revokes when the execution ends and expires 15 minutes after issuing it): no
    /// retry of this request can make the call.
    #[error("Slack refused the step execution's token ({code})")]
    ExecutionTokenRefused {
        /// Slack's error code (`token_revoked`, `token_expired`…).
        code: String,
    },
    /// The event names neither this app (`api_app_id`) nor its bot user: its own messages
    /// cannot be told from other apps', so none is taken for its own.
    #[error(
        "the event names neither the app nor its bot user: this app's messages cannot be told from other apps'"
    )]
    Unidentified,
}

impl SlackError {
    /// Whether no retry can fix this (a documented permanent error of chat.postMessage, or of
    /// an interaction's follow-ups): the event then ends `failed` instead of burning retries.
    pub fn is_permanent(&self) -> bool {
        match self {
            SlackError::Api { code } => {
                PERMANENT_POST_ERRORS.contains(&code.as_str())
                    || PERMANENT_INTERACTION_ERRORS.contains(&code.as_str())
                    || PERMANENT_STEP_ERRORS.contains(&code.as_str())
            }
            SlackError::ExecutionTokenRefused { .. } => true,
            _ => false,
        }
    }

    /// Whether Slack refused the token itself (`invalid_auth`,
    /// `token_revoked`, `account_inactive`, …): the token is no longer good, and asking again
    /// with it changes nothing. Any other failure (`internal_error`, `fatal_error`,
    /// `ratelimited`, `request_timeout`, a 5xx, a timeout) says nothing of the token.
    pub fn refuses_token(&self) -> bool {
        matches!(self, SlackError::Api { code } if TOKEN_ERRORS.contains(&code.as_str()))
    }

    /// Slack's error code, if Slack answered `ok:false`.
    pub fn code(&self) -> Option<&str> {
        match self {
            SlackError::Api { code } | SlackError::ExecutionTokenRefused { code } => Some(code),
            _ => None,
        }
    }

    /// Whether the message may have been posted although this call failed. Slack says
    /// `internal_error` and `fatal_error` posts may have succeeded; a timeout or a connection
    /// lost after the request was sent leaves the same doubt. Such failures are never retried here.
    pub fn may_have_posted(&self) -> bool {
        match self {
            SlackError::Api { code } => matches!(code.as_str(), "internal_error" | "fatal_error"),
            SlackError::Timeout | SlackError::InvalidResponse(_) => true,
            SlackError::Transport(e) => !e.is_connect(),
            SlackError::Status { status } => status.is_server_error(),
            SlackError::RateLimited { .. }
            | SlackError::NotSent
            | SlackError::TokenUnconfirmed { .. }
            | SlackError::ExecutionTokenRefused { .. }
            | SlackError::Unidentified => false,
        }
    }
}

/// Slack's answers that mean the token is no longer good: the secret is consulted and, if it
/// holds another token, the call is made once more (it did nothing the first time).
pub(super) const TOKEN_ERRORS: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_token_is_a_dead_token() {
        let api = |code: &str| SlackError::Api { code: code.into() };
        for dead in [
            "invalid_auth",
            "token_revoked",
            "account_inactive",
            "not_authed",
        ] {
            assert!(api(dead).refuses_token(), "{dead}");
        }
        for passing in [
            "internal_error",
            "fatal_error",
            "ratelimited",
            "request_timeout",
            "service_unavailable",
        ] {
            assert!(!api(passing).refuses_token(), "{passing}");
        }
        assert!(
            !SlackError::Status {
                status: StatusCode::SERVICE_UNAVAILABLE
            }
            .refuses_token()
        );
        assert!(!SlackError::Timeout.refuses_token());
    }

    #[test]
    fn ambiguous_failures_are_recognised() {
        let api = |code: &str| SlackError::Api { code: code.into() };
        assert!(api("internal_error").may_have_posted());
        assert!(api("fatal_error").may_have_posted());
        assert!(!api("channel_not_found").may_have_posted());
        assert!(SlackError::Timeout.may_have_posted());
        assert!(
            !SlackError::RateLimited {
                retry_after: Duration::from_secs(3)
            }
            .may_have_posted()
        );
        assert!(
            SlackError::Status {
                status: StatusCode::BAD_GATEWAY
            }
            .may_have_posted()
        );
        assert!(
            !SlackError::Status {
                status: StatusCode::NOT_FOUND
            }
            .may_have_posted()
        );
    }
}
