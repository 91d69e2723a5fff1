//! Verification of Slack's request signatures, on the exact bytes Slack signed, before any parsing.
//!
//! Slack, "Verifying requests from Slack": the signature is `v0=` + hex(HMAC-SHA256(signing secret,
//! `v0:{X-Slack-Request-Timestamp}:{raw body}`)); requests whose timestamp is more than five
//! minutes away from now are refused, so a captured request cannot be replayed later.

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

use crate::config::{Secret, SigningSecrets};

/// The header carrying the request's timestamp (epoch seconds), which the signature covers.
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// The header carrying the signature (`v0=` and 64 hexadecimal digits).
pub const SIGNATURE_HEADER: &str = "x-slack-signature";
/// Slack's documented replay window, in seconds, applied in both directions.
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;
const VERSION: &str = "v0";

type HmacSha256 = Hmac<Sha256>;

/// Why a request was refused. Each failure is distinct so the log says which check failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    /// No `X-Slack-Request-Timestamp` header.
    #[error("the X-Slack-Request-Timestamp header is missing")]
    MissingTimestamp,
    /// No `X-Slack-Signature` header.
    #[error("the X-Slack-Signature header is missing")]
    MissingSignature,
    /// The header named appears more than once.
    #[error("the {0} header appears more than once")]
    RepeatedHeader(&'static str),
    /// The timestamp is not a whole number of seconds (digits only).
    #[error("the X-Slack-Request-Timestamp header is not a number of seconds")]
    InvalidTimestamp,
    /// The timestamp is more than [`MAX_CLOCK_SKEW_SECS`] from now, either way.
    #[error(
        "the request timestamp is {skew_secs} s away from now (more than 300 s): check the server clock, or this is a replay"
    )]
    StaleTimestamp {
        /// How far the timestamp is from now, in seconds.
        skew_secs: u64,
    },
    /// The signature does not start with `v0=`.
    #[error("the signature version is not v0")]
    UnsupportedVersion,
    /// After `v0=`, the signature is not 64 hexadecimal digits.
    #[error("the signature is not 64 hexadecimal digits")]
    MalformedSignature,
    /// The signature is well formed and matches none of the signing secrets.
    #[error("the signature does not match any configured signing secret")]
    Mismatch,
}

/// Verifies a request at time `now_unix` (seconds since the epoch), which tests pin.
pub fn verify_at(
    secrets: &SigningSecrets,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: u64,
) -> Result<(), SignatureError> {
    let timestamp = single_header(headers, TIMESTAMP_HEADER, SignatureError::MissingTimestamp)?;
    let signature = single_header(headers, SIGNATURE_HEADER, SignatureError::MissingSignature)?;

    // Digits only: `u64::from_str` would accept a leading `+`, which Slack never sends.
    if timestamp.is_empty() || timestamp.len() > 19 || !timestamp.iter().all(|b| b.is_ascii_digit())
    {
        return Err(SignatureError::InvalidTimestamp);
    }
    let ts: u64 = std::str::from_utf8(timestamp)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(SignatureError::InvalidTimestamp)?;
    let skew_secs = now_unix.abs_diff(ts);
    if skew_secs > MAX_CLOCK_SKEW_SECS {
        return Err(SignatureError::StaleTimestamp { skew_secs });
    }

    let hex_sig = signature
        .strip_prefix(b"v0=")
        .ok_or(SignatureError::UnsupportedVersion)?;
    let mut expected = [0u8; 32];
    hex::decode_to_slice(hex_sig, &mut expected).map_err(|_| SignatureError::MalformedSignature)?;

    // Every secret is tried (no early exit on the first match) so the time taken does not
    // reveal which secret of a rotation matched; each comparison is constant-time.
    let mut matched = false;
    for secret in secrets.iter() {
        let mac = base_mac(secret, timestamp, body);
        matched |= mac.verify_slice(&expected).is_ok();
    }
    if matched {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// The `X-Slack-Signature` value Slack would send for `body` at `timestamp`.
pub fn sign(secret: &Secret, timestamp: u64, body: &[u8]) -> String {
    let mac = base_mac(secret, timestamp.to_string().as_bytes(), body);
    format!("{VERSION}={}", hex::encode(mac.finalize().into_bytes()))
}

fn base_mac(secret: &Secret, timestamp: &[u8], body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes keys of any size");
    mac.update(VERSION.as_bytes());
    mac.update(b":");
    mac.update(timestamp);
    mac.update(b":");
    mac.update(body);
    mac
}

/// Exactly one value of `name` (header names are case-insensitive in `HeaderMap`).
fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
    missing: SignatureError,
) -> Result<&'a [u8], SignatureError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next().ok_or(missing)?;
    if values.next().is_some() {
        return Err(SignatureError::RepeatedHeader(name));
    }
    Ok(first.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    // Slack's own example from "Verifying requests from Slack".
    const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const SLACK_TIMESTAMP: u64 = 1531420618;
    const SLACK_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SLACK_SIGNATURE: &str =
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn secrets(list: &str) -> SigningSecrets {
        SigningSecrets::parse(list).unwrap()
    }

    fn headers(ts: &str, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(TIMESTAMP_HEADER, HeaderValue::from_str(ts).unwrap());
        h.insert(SIGNATURE_HEADER, HeaderValue::from_str(sig).unwrap());
        h
    }

    #[test]
    fn slacks_documented_example_verifies() {
        let h = headers(&SLACK_TIMESTAMP.to_string(), SLACK_SIGNATURE);
        assert_eq!(
            verify_at(
                &secrets(SLACK_SECRET),
                &h,
                SLACK_BODY.as_bytes(),
                SLACK_TIMESTAMP
            ),
            Ok(())
        );
        assert_eq!(
            sign(
                &Secret::new(SLACK_SECRET),
                SLACK_TIMESTAMP,
                SLACK_BODY.as_bytes()
            ),
            SLACK_SIGNATURE
        );
    }

    #[test]
    fn any_secret_of_a_rotation_verifies() {
        let h = headers(&SLACK_TIMESTAMP.to_string(), SLACK_SIGNATURE);
        let both = secrets(&format!("new-secret,{SLACK_SECRET}"));
        assert_eq!(
            verify_at(&both, &h, SLACK_BODY.as_bytes(), SLACK_TIMESTAMP),
            Ok(())
        );
        assert_eq!(
            verify_at(
                &secrets("new-secret"),
                &h,
                SLACK_BODY.as_bytes(),
                SLACK_TIMESTAMP
            ),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn a_changed_body_does_not_verify() {
        let h = headers(&SLACK_TIMESTAMP.to_string(), SLACK_SIGNATURE);
        let mut body = SLACK_BODY.as_bytes().to_vec();
        body.push(b' ');
        assert_eq!(
            verify_at(&secrets(SLACK_SECRET), &h, &body, SLACK_TIMESTAMP),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn timestamps_more_than_five_minutes_away_are_refused_both_ways() {
        let s = secrets(SLACK_SECRET);
        let h = headers(&SLACK_TIMESTAMP.to_string(), SLACK_SIGNATURE);
        let body = SLACK_BODY.as_bytes();
        assert_eq!(verify_at(&s, &h, body, SLACK_TIMESTAMP + 300), Ok(()));
        assert_eq!(verify_at(&s, &h, body, SLACK_TIMESTAMP - 300), Ok(()));
        assert_eq!(
            verify_at(&s, &h, body, SLACK_TIMESTAMP + 301),
            Err(SignatureError::StaleTimestamp { skew_secs: 301 })
        );
        assert_eq!(
            verify_at(&s, &h, body, SLACK_TIMESTAMP - 301),
            Err(SignatureError::StaleTimestamp { skew_secs: 301 })
        );
    }

    #[test]
    fn missing_repeated_and_malformed_headers_are_refused() {
        let s = secrets(SLACK_SECRET);
        let body = SLACK_BODY.as_bytes();
        let now = SLACK_TIMESTAMP;

        let mut h = headers(&now.to_string(), SLACK_SIGNATURE);
        h.remove(TIMESTAMP_HEADER);
        assert_eq!(
            verify_at(&s, &h, body, now),
            Err(SignatureError::MissingTimestamp)
        );

        let mut h = headers(&now.to_string(), SLACK_SIGNATURE);
        h.remove(SIGNATURE_HEADER);
        assert_eq!(
            verify_at(&s, &h, body, now),
            Err(SignatureError::MissingSignature)
        );

        let mut h = headers(&now.to_string(), SLACK_SIGNATURE);
        h.append(TIMESTAMP_HEADER, HeaderValue::from_static("1531420618"));
        assert_eq!(
            verify_at(&s, &h, body, now),
            Err(SignatureError::RepeatedHeader(TIMESTAMP_HEADER))
        );

        let mut h = headers(&now.to_string(), SLACK_SIGNATURE);
        h.append(SIGNATURE_HEADER, HeaderValue::from_static(SLACK_SIGNATURE));
        assert_eq!(
            verify_at(&s, &h, body, now),
            Err(SignatureError::RepeatedHeader(SIGNATURE_HEADER))
        );

        for ts in [
            "",
            "abc",
            "+1531420618",
            "-1",
            "1531420618.5",
            "99999999999999999999",
        ] {
            let h = headers(ts, SLACK_SIGNATURE);
            assert_eq!(
                verify_at(&s, &h, body, now),
                Err(SignatureError::InvalidTimestamp),
                "{ts:?}"
            );
        }

        let v1 = SLACK_SIGNATURE.replacen("v0=", "v1=", 1);
        let h = headers(&now.to_string(), &v1);
        assert_eq!(
            verify_at(&s, &h, body, now),
            Err(SignatureError::UnsupportedVersion)
        );

        for sig in [
            "v0=",
            "v0=zz",
            &SLACK_SIGNATURE[..SLACK_SIGNATURE.len() - 2],
        ] {
            let h = headers(&now.to_string(), sig);
            assert_eq!(
                verify_at(&s, &h, body, now),
                Err(SignatureError::MalformedSignature)
            );
        }
    }

    #[test]
    fn header_names_are_case_insensitive() {
        let mut h = HeaderMap::new();
        h.insert(
            http::HeaderName::from_bytes(b"X-Slack-Request-Timestamp").unwrap(),
            HeaderValue::from_str(&SLACK_TIMESTAMP.to_string()).unwrap(),
        );
        h.insert(
            http::HeaderName::from_bytes(b"X-SLACK-SIGNATURE").unwrap(),
            HeaderValue::from_static(SLACK_SIGNATURE),
        );
        assert_eq!(
            verify_at(
                &secrets(SLACK_SECRET),
                &h,
                SLACK_BODY.as_bytes(),
                SLACK_TIMESTAMP
            ),
            Ok(())
        );
    }
}
