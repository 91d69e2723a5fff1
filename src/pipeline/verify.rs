//! Step one: the signature on the exact bytes Slack signed, then the parse into [`Incoming`].

use http::header::CONTENT_TYPE;

use super::{Delivery, ProcessError, Processor, Transport, header_str, unix_ms};
use crate::secrets::SecretValues;
use crate::slack::interaction::Incoming;
use crate::slack::signature::{self, SignatureError};

/// A request whose signature matches no cached secret waits at most this long (from its
/// arrival) for the secret to be read again: a rotation is picked up within Slack's 3 s for
/// the request that meets it first (commands and interactions are never retried).
const SECRET_WAIT: std::time::Duration = std::time::Duration::from_millis(1500);

impl Processor {
    /// Verifies the exact bytes Slack signed, then parses them: nothing else is read before
    /// the signature holds (a Socket Mode envelope has none: its connection authenticated it). A well-formed, fresh signature that matches none of the signing
    /// secrets may mean they were rotated: they are read again (at most once per refresh
    /// interval) and the signature checked once more.
    pub async fn verify_and_parse(
        &self,
        delivery: &Delivery<'_>,
    ) -> Result<Incoming, ProcessError> {
        let now_unix = unix_ms(delivery.now) / 1000;
        let verify = |values: &SecretValues| match &values.signing {
            Some(signing) => {
                signature::verify_at(signing, delivery.headers, delivery.body, now_unix)
            }
            // A worker serves no HTTP request; should one reach it, nothing verifies.
            None => Err(SignatureError::Mismatch),
        };
        if delivery.transport == Transport::SocketMode {
            let content_type = header_str(delivery.headers, CONTENT_TYPE.as_str());
            return Incoming::parse(content_type, delivery.body).map_err(ProcessError::Malformed);
        }
        let seen = self.secrets.current();
        match verify(&seen) {
            Ok(()) => {}
            Err(SignatureError::Mismatch)
                if self
                    .secrets
                    .refresh(
                        "a signature matched no signing secret",
                        &seen,
                        delivery.started + SECRET_WAIT,
                    )
                    .await =>
            {
                verify(&self.secrets.current())?
            }
            Err(e) => return Err(e.into()),
        }
        let content_type = header_str(delivery.headers, CONTENT_TYPE.as_str());
        Incoming::parse(content_type, delivery.body).map_err(ProcessError::Malformed)
    }
}
