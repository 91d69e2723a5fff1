//! The bodies of the fuzz targets (`fuzz/`), kept in the library so that `cargo test` replays
//! their corpus and every crash input found (`tests/fuzz_corpus.rs`) on the stable toolchain.
//! Each panics only when an invariant breaks.

use http::{HeaderMap, HeaderValue};

use crate::config::{Secret, SigningSecrets};
use crate::slack::envelope::{Envelope, MAX_EVENT_ID_LEN};
use crate::slack::signature::{self, SIGNATURE_HEADER, SignatureError, TIMESTAMP_HEADER};

const SECRET: &str = "fuzz-signing-secret";

/// Splits `data` into length-prefixed pieces: `[flags, len, bytes…, len, bytes…, rest]`.
fn pieces(data: &[u8]) -> (u8, &[u8], &[u8], &[u8]) {
    let (flags, mut rest) = data.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
    let timestamp = take(&mut rest);
    let signature = take(&mut rest);
    (flags, timestamp, signature, rest)
}

fn take<'a>(rest: &mut &'a [u8]) -> &'a [u8] {
    let Some((&len, tail)) = rest.split_first() else {
        return &[];
    };
    let (piece, tail) = tail.split_at((len as usize).min(tail.len()));
    *rest = tail;
    piece
}

/// Arbitrary timestamp and signature headers and body, at a clock near the timestamp.
/// Invariants: no panic; a request signed with the secret verifies within 300 s and not beyond;
/// any other signature is refused.
pub fn check_signature(data: &[u8]) {
    let (flags, timestamp, signature_bytes, body) = pieces(data);
    let secrets = SigningSecrets::parse(SECRET).expect("a valid secret");
    // A canonical decimal timestamp (what `sign` formats), or none.
    let ts: Option<u64> = std::str::from_utf8(timestamp)
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| t.to_string().as_bytes() == timestamp);
    let skew = u64::from(flags >> 1) * 5; // 0..=635 s
    let now = ts.map_or(1_700_000_000, |t| t.saturating_add(skew));

    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(timestamp) {
        headers.insert(TIMESTAMP_HEADER, v);
    }
    let correct = ts.map(|t| signature::sign(&Secret::new(SECRET), t, body));
    let use_correct = flags & 1 == 1 && correct.is_some();
    let signature_value = if use_correct {
        correct.clone().map(String::into_bytes).unwrap_or_default()
    } else {
        signature_bytes.to_vec()
    };
    if let Ok(v) = HeaderValue::from_bytes(&signature_value) {
        headers.insert(SIGNATURE_HEADER, v);
    }

    let result = signature::verify_at(&secrets, &headers, body, now);
    if use_correct && timestamp.len() <= 19 {
        if skew <= signature::MAX_CLOCK_SKEW_SECS {
            assert_eq!(result, Ok(()), "a correctly signed request was refused");
        } else {
            assert!(
                matches!(result, Err(SignatureError::StaleTimestamp { .. })),
                "{result:?}"
            );
        }
    }
    if result.is_ok() {
        // Only the secret's own signature verifies (lowercase or uppercase hex).
        let given = headers
            .get(SIGNATURE_HEADER)
            .map(|v| v.as_bytes().to_ascii_lowercase());
        assert_eq!(
            given,
            correct.map(String::into_bytes),
            "a wrong signature verified"
        );
    }
}

/// Arbitrary bytes as an Events API body. Invariants: no panic; an accepted `event_callback`
/// has an `event_id` of 1 to 128 letters, digits, `_` or `-`.
pub fn check_envelope(data: &[u8]) {
    // The pipeline's entry point reads the same bytes as an envelope, whatever the content
    // type claims (a JSON object is never taken for a form).
    for content_type in [
        Some("application/json"),
        None,
        Some("application/x-www-form-urlencoded"),
    ] {
        let parsed = crate::slack::interaction::Incoming::parse(content_type, data);
        let direct = serde_json::from_slice::<Envelope>(data);
        if let (Ok(crate::slack::interaction::Incoming::Envelope(_)), Err(e)) = (&parsed, &direct) {
            panic!("parsed as an envelope by the pipeline, not directly: {e}");
        }
        if content_type == Some("application/json") {
            assert_eq!(parsed.is_ok(), direct.is_ok(), "JSON: the same verdict");
        }
    }
    if let Ok(Envelope::EventCallback(callback)) = serde_json::from_slice::<Envelope>(data) {
        let id = callback.event_id.as_str();
        assert!(
            !id.is_empty() && id.len() <= MAX_EVENT_ID_LEN,
            "event_id of {} bytes",
            id.len()
        );
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "event_id {id:?}"
        );
        let _ = callback.skip_reason();
        let _ = callback.bot_user_id();
        let callback = std::sync::Arc::from(callback);
        // Every typed listener reads the event (or declines it) without a panic, and the
        // ledger keys derived from it are valid ledger keys.
        let _ = typed_listeners().takes(&callback);
        let _ = crate::reference_app().takes(&callback);
        for by_message in [false, true] {
            let (primary, alias) = crate::keys::ledger_keys(&callback, by_message);
            for key in std::iter::once(&primary).chain(&alias) {
                assert!(key.as_str().len() <= MAX_EVENT_ID_LEN, "key {key}");
            }
        }
    }
}

/// Arbitrary bytes as a verified form (a slash command's, an interaction's `payload`), and the
/// same bytes as a `response_url`. Invariants: no panic; what parses has a kind its listeners
/// can select on and a ledger key (every kind but a suggestion) that is a valid, bounded ledger
/// key; a response URL is allowed only on Slack's hooks host over https or on the loopback
/// stand-in's own origin.
pub fn check_interaction(data: &[u8]) {
    use crate::slack::interaction::{HOOKS_HOST, Incoming, Kind, allowed_response_url};
    let form = Some("application/x-www-form-urlencoded");
    if let Ok(Incoming::Interaction(i)) = Incoming::parse(form, data) {
        match i.key() {
            None => assert_eq!(i.kind, Kind::BlockSuggestion),
            Some(key) => {
                let key = key.as_str();
                assert!(
                    !key.is_empty() && key.len() <= MAX_EVENT_ID_LEN,
                    "key {key}"
                );
                assert!(
                    key.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                    "key {key:?}"
                );
            }
        }
        assert!(i.selector().is_some(), "{:?} without a selector", i.kind);
        let _ = (i.team(), i.message_ts(), i.thread_ts(), i.block_id());
        let _ = crate::reference_app().route_interaction(&i).is_some();
    }
    let url = String::from_utf8_lossy(data);
    for base in ["https://slack.com/api", "http://127.0.0.1:4000/api"] {
        if let Ok(uri) = allowed_response_url(&url, base) {
            let host = uri.host().unwrap_or_default();
            let hooks = uri.scheme_str() == Some("https") && host.eq_ignore_ascii_case(HOOKS_HOST);
            let local = base.starts_with("http://127.0.0.1")
                && uri.scheme_str() == Some("http")
                && host == "127.0.0.1"
                && uri.port_u16() == Some(4000);
            assert!(hooks || local, "{url:?} allowed against {base}");
        }
    }
}

/// An app with one listener of every typed kind, each doing nothing.
fn typed_listeners() -> crate::app::App {
    use crate::app::*;
    App::new()
        .app_mention(|_: Ctx, _: AppMention| async { Ok(()) })
        .message(r"(\w+)", |_: Ctx, _: MessageEvent| async { Ok(()) })
        .message_where(
            |m: &MessageEvent| m.is_dm(),
            |_: Ctx, _: MessageEvent| async { Ok(()) },
        )
        .reaction_added(|_: Ctx, _: Reaction| async { Ok(()) })
        .reaction_removed(|_: Ctx, _: Reaction| async { Ok(()) })
        .member_joined_channel(|_: Ctx, _: MemberJoinedChannel| async { Ok(()) })
        .app_home_opened(|_: Ctx, _: AppHomeOpened| async { Ok(()) })
        .team_join(|_: Ctx, _: TeamJoin| async { Ok(()) })
        .channel_created(|_: Ctx, _: ChannelCreated| async { Ok(()) })
        .event("pin_added", |_: Ctx, _| async { Ok(()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_correctly_signed_input_exercises_the_accepting_path() {
        let mut data = vec![1u8]; // use the correct signature, no skew
        let ts = b"1700000000";
        data.push(ts.len() as u8);
        data.extend_from_slice(ts);
        data.push(0);
        data.extend_from_slice(b"{\"type\":\"event_callback\"}");
        check_signature(&data);
    }

    #[test]
    fn short_and_empty_inputs_do_not_panic() {
        for data in [
            &b""[..],
            b"\x01",
            b"\x01\x05",
            b"\xff\xff\xff",
            b"\x01\x0a1700000000",
        ] {
            check_signature(data);
            check_envelope(data);
        }
    }
}
