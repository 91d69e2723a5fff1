//! What Slack defines, and how slack-once speaks to it: the request signature
//! ([`signature`]), the Events API envelope ([`envelope`]), interactions and slash commands
//! (`interaction`), and the Web API: its client (methods, their classification into reads
//! and writes, the 429 rule), its error taxonomy, the look-up of an earlier post by its
//! metadata, and where the bot token comes from.
//!
//! What a refused token comes to, [`crate::secrets::Refused`], has that one path:
//!
//! ```compile_fail,E0432
//! use slack_once::slack::Refused;
//! ```

mod client;
pub mod envelope;
mod errors;
pub(crate) mod interaction;
mod lookup;
pub mod signature;
mod tokens;

pub use client::{Args, SlackClient, api_url, is_read_method};
#[cfg(feature = "testing")]
pub(crate) use client::{under_test, with_own_client_base};
pub use errors::{
    PERMANENT_INTERACTION_ERRORS, PERMANENT_POST_ERRORS, PERMANENT_STEP_ERRORS, SlackError,
};
pub use interaction::{HOOKS_HOST, Incoming, Interaction, Kind, Malformed, allowed_response_url};
pub use lookup::{
    Found, LOOKUP_PAGE_SIZE, Lookup, METADATA_KEY, OurApp, REPLY_METADATA_TYPE, ReplyQuery,
    post_metadata,
};
pub use tokens::TokenSource;
