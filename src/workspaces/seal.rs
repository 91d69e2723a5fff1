//! Tokens sealed at rest: envelope encryption with AWS KMS (`SLACK_TOKEN_KEY_ID`: a key id,
//! ARN or alias), or, off AWS, AES-256-GCM under keys the operator gives ([`TokenKeys`]:
//! `SLACK_TOKEN_KEYS` or `SLACK_TOKEN_KEYS_FILE`). An installation's tokens (bot, refresh, user) are encrypted here with
//! AES-256-GCM under a data key KMS makes (`GenerateDataKey`, AES_256) and returns wrapped;
//! the item keeps the ciphertext and the wrapped key, never the tokens, and reading them asks
//! KMS to unwrap the key (`Decrypt`). So anyone who can read the table (`dynamodb:Scan`, an
//! export, a backup, `ReadOnlyAccess`) reads no token: it takes the key's `kms:Decrypt`, which
//! the template's key policy gives only the functions' roles.
//!
//! - **Bound to its item.** The data key's encryption context names the app and the item
//!   (`{"purpose": "slack-once tokens", "app": CLIENT_ID, "item": PK}`), and so does the
//!   ciphertext's associated data: a ciphertext copied to another item, or another app's, does
//!   not decrypt (KMS refuses to unwrap its key there, and GCM refuses the text).
//! - **Keys cached, bounded.** A data key made for an item is used again for that item's next
//!   writes within [`DATA_KEY_AGE`] and [`DATA_KEY_USES`] (a refresh, a revocation: rare); an
//!   unwrapped key is kept for [`UNWRAPPED_AGE`] by its wrapped form (at most
//!   [`UNWRAPPED_KEPT`] of them), so an installation read every 30 s costs one `Decrypt` per
//!   process in that time. Every nonce is random (96 bits); a key seals at most
//!   [`DATA_KEY_USES`] texts (and one more for each key [`Seal::ready`] handed out), far below
//!   where random nonces may repeat.
//! - **Ready before an exchange.** [`Seal::ready`] hands out the data key a refresh's store
//!   will seal with ([`ReadyKey`]), before the refresh exchanges its token: that store seals
//!   with it however late it comes, and never needs KMS between the exchange and the write.
//! - **Keys the operator gives** (no KMS): each key is named by an id; the first seals, every
//!   one opens, so a key is rotated by putting the new one first and keeping the old after it
//!   until every row was written again (a refresh, a reinstall, a read of the PostgreSQL store,
//!   which seals again under the current key). A sealed text keeps its key's id where a KMS
//!   text keeps its wrapped data key (`key:ID`, [`LOCAL_KEY_PREFIX`]); its associated data is
//!   the same as under KMS (purpose, app, item), so a text copied to another item or app does
//!   not open. Each text has its own random 96-bit nonce: far below 2^32 texts a key, rotate.
//! - Without a key (local mode, tests that set none) tokens are kept as they are, and the
//!   process says so at start. An item at the app's own key kept as it is (written before the
//!   key was set) is sealed at its first read by a process with the key (the store's `find`);
//!   unscoped items are read as they are, and written in place as they are until
//!   `seal-installations` sets the app's sealing mark (a refresh or a revocation then writes
//!   them sealed, in place) and moves them to the app's own keys, sealed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::DataKeySpec;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{Installation, Token};

/// How long a data key made for an item seals that item's writes.
pub const DATA_KEY_AGE: Duration = Duration::from_secs(300);
/// How many texts one data key seals at most.
pub const DATA_KEY_USES: u32 = 1_000;
/// How long an unwrapped data key is kept.
pub const UNWRAPPED_AGE: Duration = Duration::from_secs(900);
/// How many unwrapped data keys are kept at most (one per installation read lately).
pub const UNWRAPPED_KEPT: usize = 10_000;
/// The format of a sealed item (its `seal` attribute).
pub const SEAL_FORMAT: u64 = 1;
/// What the encryption context names the key's use.
const PURPOSE: &str = "slack-once tokens";

/// Why tokens could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// KMS did not answer, or refused (the key's policy, a disabled key, throttling).
    #[error("KMS did not make or unwrap the data key")]
    Kms(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The ciphertext does not open under its item and app: copied from another item, altered,
    /// or sealed with another context.
    #[error("the sealed tokens do not open for this item")]
    Tampered,
    /// A sealed item, and no key to open it with (`SLACK_TOKEN_KEY_ID` unset).
    #[error(
        "the installation's tokens are sealed with KMS and this process has no key: set SLACK_TOKEN_KEY_ID"
    )]
    NoKey,
    /// Sealed under a key the operator gave, and this process was given none.
    #[error(
        "the installation's tokens are sealed under the token key `{0}` and this process has no \
         token keys: set SLACK_TOKEN_KEYS or SLACK_TOKEN_KEYS_FILE (with that key among them)"
    )]
    NoLocalKey(String),
    /// Sealed under a key id the keys given do not hold.
    #[error(
        "the installation's tokens are sealed under the token key `{id}`, which the keys given \
         ({known}) do not hold: keep it in SLACK_TOKEN_KEYS (or its file) after the current key \
         until every installation is sealed again"
    )]
    UnknownKey {
        /// The id the sealed text names.
        id: String,
        /// The ids given, current first.
        known: String,
    },
}

/// An installation's tokens, as sealed.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// The bot token.
    pub bot: String,
    /// Its refresh token, with rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_refresh: Option<String>,
    /// The installing user's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its refresh token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_refresh: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens([redacted])")
    }
}

impl Tokens {
    /// The tokens of `installation`, and the installation without them (each token left empty).
    pub fn taken_from(installation: &Installation) -> (Tokens, Installation) {
        let mut bare = installation.clone();
        let tokens = Tokens {
            bot: std::mem::take(&mut bare.bot.token),
            bot_refresh: bare.bot.refresh_token.as_mut().map(std::mem::take),
            user: bare.user.as_mut().map(|u| std::mem::take(&mut u.token)),
            user_refresh: bare
                .user
                .as_mut()
                .and_then(|u| u.refresh_token.as_mut().map(std::mem::take)),
        };
        (tokens, bare)
    }

    /// `bare` with these tokens put back.
    pub fn put_into(self, mut bare: Installation) -> Installation {
        bare.bot = Token {
            token: self.bot,
            refresh_token: self.bot_refresh,
            expires_at_ms: bare.bot.expires_at_ms,
        };
        if let Some(user) = bare.user.as_mut() {
            user.token = self.user.unwrap_or_default();
            user.refresh_token = self.user_refresh;
        }
        bare
    }
}

/// Sealed tokens, as an item keeps them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// The nonce (12 bytes), then the ciphertext and its tag.
    pub text: Vec<u8>,
    /// The data key, wrapped by KMS (its key id inside).
    pub key: Vec<u8>,
}

/// A data key [`Seal::ready`] handed out for one item, for the write that follows: held here,
/// so that write never needs KMS, however long the exchange between them took.
#[derive(Default)]
pub struct ReadyKey {
    held: Option<Held>,
}

enum Held {
    /// A KMS data key made for one item.
    Kms {
        app: String,
        item: String,
        plain: [u8; 32],
        wrapped: Vec<u8>,
    },
    /// The operator's current key: nothing to have from elsewhere, sealed with at the write.
    Local,
}

impl ReadyKey {
    /// No key held (no KMS key, or a store that seals nothing): the write seals as
    /// [`Seal::seal`] does.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether a data key is held (the write that follows seals with it).
    pub fn holds_key(&self) -> bool {
        self.held.is_some()
    }
}

impl std::fmt::Debug for ReadyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.held {
            Some(Held::Kms { item, .. }) => write!(f, "ReadyKey({item} [redacted])"),
            Some(Held::Local) => f.write_str("ReadyKey(the current token key)"),
            None => f.write_str("ReadyKey(none)"),
        }
    }
}

struct DataKey {
    plain: [u8; 32],
    wrapped: Vec<u8>,
    made: Instant,
    uses: u32,
}

struct Unwrapped {
    plain: [u8; 32],
    at: Instant,
}

/// Where tokens are sealed: KMS with the key `SLACK_TOKEN_KEY_ID` names, the keys the operator
/// gives ([`TokenKeys`]), or nowhere.
pub struct Seal {
    kms: Option<Kms>,
    local: Option<TokenKeys>,
}

struct Kms {
    client: aws_sdk_kms::Client,
    key_id: String,
    /// The data key sealing each item's writes, by (app, item).
    making: Mutex<HashMap<(String, String), DataKey>>,
    /// Unwrapped data keys, by their wrapped form.
    unwrapped: Mutex<HashMap<Vec<u8>, Unwrapped>>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.kms, &self.local) {
            (Some(kms), _) => write!(f, "Seal(KMS {})", kms.key_id),
            (None, Some(keys)) => write!(f, "Seal(token key {})", keys.current_id()),
            (None, None) => f.write_str("Seal(none)"),
        }
    }
}

impl Seal {
    /// Tokens kept as they are.
    pub fn none() -> Self {
        Self {
            kms: None,
            local: None,
        }
    }

    /// Tokens sealed with AES-256-GCM under the operator's `keys`: the first seals, every one
    /// opens.
    pub fn local(keys: TokenKeys) -> Self {
        Self {
            kms: None,
            local: Some(keys),
        }
    }

    /// Tokens sealed with the KMS key `key_id` (an id, an ARN or `alias/…`), through `client`.
    pub fn kms(client: aws_sdk_kms::Client, key_id: impl Into<String>) -> Self {
        Self {
            kms: Some(Kms {
                client,
                key_id: key_id.into(),
                making: Mutex::default(),
                unwrapped: Mutex::default(),
            }),
            local: None,
        }
    }

    /// The KMS client from the environment (`AWS_ENDPOINT_URL_KMS` for a local server), built
    /// once per process, and the key `key_id`.
    pub async fn kms_from_env(key_id: impl Into<String>) -> Self {
        let config = aws_sdk_kms::config::Builder::from(crate::aws::sdk_config().await)
            .timeout_config(crate::aws::timeouts(
                Duration::from_secs(2),
                Duration::from_secs(5),
            ))
            .build();
        Self::kms(aws_sdk_kms::Client::from_conf(config), key_id)
    }

    /// A data key for the item `item` of the app `app`, had now, for the write that follows
    /// ([`Seal::seal_ready`]): before a token refresh exchanges its refresh token (Slack revokes
    /// the pair a later exchange replaces), so that KMS being down stops the refresh before the
    /// exchange, not between it and the store. The write seals with this very key however late
    /// it comes (past [`DATA_KEY_AGE`] or [`DATA_KEY_USES`]: one text more, once), never with
    /// one it would have to ask KMS for.
    pub async fn ready(&self, app: &str, item: &str) -> Result<ReadyKey, SealError> {
        match (&self.kms, &self.local) {
            (Some(kms), _) => {
                let (plain, wrapped) = kms.data_key(app, item).await?;
                Ok(ReadyKey {
                    held: Some(Held::Kms {
                        app: app.to_string(),
                        item: item.to_string(),
                        plain,
                        wrapped,
                    }),
                })
            }
            (None, Some(_)) => Ok(ReadyKey {
                held: Some(Held::Local),
            }),
            (None, None) => Ok(ReadyKey::none()),
        }
    }

    /// Whether tokens are sealed.
    pub fn seals(&self) -> bool {
        self.kms.is_some() || self.local.is_some()
    }

    /// The key's name, where tokens are sealed: KMS's key, or the operator's current key's id.
    pub fn key_id(&self) -> Option<&str> {
        match (&self.kms, &self.local) {
            (Some(kms), _) => Some(kms.key_id.as_str()),
            (None, Some(keys)) => Some(keys.current_id()),
            (None, None) => None,
        }
    }

    /// Whether `sealed` is sealed as this seal seals now: under KMS (which rotates its own
    /// keys), or under the operator's current key. `false` for a text under an older key id,
    /// which a store writes again under the current one.
    pub fn is_current(&self, sealed: &Sealed) -> bool {
        match (&self.kms, &self.local, local_key_id(&sealed.key)) {
            (Some(_), _, None) => true,
            (None, Some(keys), Some(id)) => id == keys.current_id(),
            _ => false,
        }
    }

    /// `tokens` sealed for the item `item` of the app `app`; `None` without a key.
    pub async fn seal(
        &self,
        app: &str,
        item: &str,
        tokens: &Tokens,
    ) -> Result<Option<Sealed>, SealError> {
        self.seal_ready(&ReadyKey::none(), app, item, tokens).await
    }

    /// `tokens` sealed for the item `item` of the app `app` with the key `ready` holds for
    /// that item (no call to KMS), or else as [`Seal::seal`] does; `None` without a key.
    pub async fn seal_ready(
        &self,
        ready: &ReadyKey,
        app: &str,
        item: &str,
        tokens: &Tokens,
    ) -> Result<Option<Sealed>, SealError> {
        let (plain, wrapped) = match (&self.kms, &self.local) {
            (Some(kms), _) => match &ready.held {
                Some(Held::Kms {
                    app: held_app,
                    item: held_item,
                    plain,
                    wrapped,
                }) if held_app == app && held_item == item => (*plain, wrapped.clone()),
                _ => kms.data_key(app, item).await?,
            },
            (None, Some(keys)) => {
                let (id, key) = keys.current();
                (*key, local_key_name(id))
            }
            (None, None) => return Ok(None),
        };
        let cipher = Aes256Gcm::new_from_slice(&plain).expect("a 32-byte key");
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let json = serde_json::to_vec(tokens).expect("tokens serialise");
        let aad = associated(app, item);
        let text = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: &json,
                    aad: &aad,
                },
            )
            .map_err(|_| SealError::Tampered)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&text);
        Ok(Some(Sealed {
            text: out,
            key: wrapped,
        }))
    }

    /// The tokens `sealed` holds, for the item `item` of the app `app`.
    pub async fn open(&self, app: &str, item: &str, sealed: &Sealed) -> Result<Tokens, SealError> {
        let plain = match (local_key_id(&sealed.key), &self.local, &self.kms) {
            (Some(id), Some(keys), _) => *keys.get(id).ok_or_else(|| SealError::UnknownKey {
                id: id.to_string(),
                known: keys.ids().join(", "),
            })?,
            (Some(id), None, _) => return Err(SealError::NoLocalKey(id.to_string())),
            (None, _, Some(kms)) => kms.unwrap_key(app, item, &sealed.key).await?,
            (None, _, None) => return Err(SealError::NoKey),
        };
        if sealed.text.len() < 12 + 16 {
            return Err(SealError::Tampered);
        }
        let (nonce, text) = sealed.text.split_at(12);
        let cipher = Aes256Gcm::new_from_slice(&plain).expect("a 32-byte key");
        let aad = associated(app, item);
        let json = cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: text,
                    aad: &aad,
                },
            )
            .map_err(|_| SealError::Tampered)?;
        serde_json::from_slice(&json).map_err(|_| SealError::Tampered)
    }
}

/// The encryption context of an item's data key.
fn context(app: &str, item: &str) -> [(&'static str, String); 3] {
    [
        ("purpose", PURPOSE.to_string()),
        ("app", app.to_string()),
        ("item", item.to_string()),
    ]
}

/// The ciphertext's associated data: the same names, as bytes.
fn associated(app: &str, item: &str) -> Vec<u8> {
    format!("{PURPOSE}\0{app}\0{item}").into_bytes()
}

/// What a text sealed under an operator's key keeps where a KMS text keeps its wrapped data key:
/// this, then the key's id. A KMS ciphertext blob starts with a version byte that is no ASCII
/// letter, so the two never meet.
pub const LOCAL_KEY_PREFIX: &[u8] = b"key:";

/// The `key` of a text sealed under the operator's key `id`.
fn local_key_name(id: &str) -> Vec<u8> {
    [LOCAL_KEY_PREFIX, id.as_bytes()].concat()
}

/// The operator's key id a sealed text names, if it was sealed under one (else KMS's).
fn local_key_id(key: &[u8]) -> Option<&str> {
    key.strip_prefix(LOCAL_KEY_PREFIX)
        .and_then(|id| std::str::from_utf8(id).ok())
}

pub use crate::token_keys::{TokenKeys, TokenKeysError};

impl Kms {
    /// A data key for the item: the one made for it lately, or a new one.
    async fn data_key(&self, app: &str, item: &str) -> Result<([u8; 32], Vec<u8>), SealError> {
        let id = (app.to_string(), item.to_string());
        {
            let mut making = self.making.lock().expect("key lock");
            if let Some(k) = making.get_mut(&id)
                && k.made.elapsed() < DATA_KEY_AGE
                && k.uses < DATA_KEY_USES
            {
                k.uses += 1;
                return Ok((k.plain, k.wrapped.clone()));
            }
        }
        let mut request = self
            .client
            .generate_data_key()
            .key_id(&self.key_id)
            .key_spec(DataKeySpec::Aes256);
        for (k, v) in context(app, item) {
            request = request.encryption_context(k, v);
        }
        let made = request
            .send()
            .await
            .map_err(|e| SealError::Kms(Box::new(e.into_service_error())))?;
        let (Some(plain), Some(wrapped)) = (made.plaintext(), made.ciphertext_blob()) else {
            return Err(SealError::Kms(
                "GenerateDataKey answered without a key".into(),
            ));
        };
        let plain: [u8; 32] = plain
            .as_ref()
            .try_into()
            .map_err(|_| SealError::Kms("GenerateDataKey answered a key of another size".into()))?;
        let wrapped = wrapped.as_ref().to_vec();
        let mut making = self.making.lock().expect("key lock");
        making.retain(|_, k| k.made.elapsed() < DATA_KEY_AGE);
        making.insert(
            id,
            DataKey {
                plain,
                wrapped: wrapped.clone(),
                made: Instant::now(),
                uses: 1,
            },
        );
        self.unwrapped.lock().expect("key lock").insert(
            wrapped.clone(),
            Unwrapped {
                plain,
                at: Instant::now(),
            },
        );
        Ok((plain, wrapped))
    }

    /// The data key `wrapped` unwrapped, for the item (its context must match).
    async fn unwrap_key(
        &self,
        app: &str,
        item: &str,
        wrapped: &[u8],
    ) -> Result<[u8; 32], SealError> {
        if let Some(k) = self.unwrapped.lock().expect("key lock").get(wrapped)
            && k.at.elapsed() < UNWRAPPED_AGE
        {
            return Ok(k.plain);
        }
        // No key id: the wrapped key names its own, so a ciphertext sealed under an earlier key
        // (SLACK_TOKEN_KEY_ID changed, an alias moved) still opens where the role may use it.
        let mut request = self
            .client
            .decrypt()
            .ciphertext_blob(Blob::new(wrapped.to_vec()));
        for (k, v) in context(app, item) {
            request = request.encryption_context(k, v);
        }
        let opened = match request.send().await {
            Ok(opened) => opened,
            Err(e) => {
                let e = e.into_service_error();
                // Another item's key (its context another's), or altered: not a KMS outage.
                return Err(match e.is_invalid_ciphertext_exception() {
                    true => SealError::Tampered,
                    false => SealError::Kms(Box::new(e)),
                });
            }
        };
        let plain: [u8; 32] = opened
            .plaintext()
            .map(|p| p.as_ref())
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| SealError::Kms("Decrypt answered no 32-byte key".into()))?;
        let mut unwrapped = self.unwrapped.lock().expect("key lock");
        if unwrapped.len() >= UNWRAPPED_KEPT {
            unwrapped.retain(|_, k| k.at.elapsed() < UNWRAPPED_AGE);
            if unwrapped.len() >= UNWRAPPED_KEPT {
                unwrapped.clear();
            }
        }
        unwrapped.insert(
            wrapped.to_vec(),
            Unwrapped {
                plain,
                at: Instant::now(),
            },
        );
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installation() -> Installation {
        Installation {
            team_id: Some("T1".into()),
            team_name: None,
            enterprise_id: None,
            enterprise_name: None,
            enterprise_url: None,
            is_enterprise_install: false,
            app_id: Some("A1".into()),
            bot_id: None,
            bot_user_id: Some("U1".into()),
            bot_scopes: vec![],
            bot: Token {
                token: "xoxb-secret".into(),
                refresh_token: Some("xoxe-secret".into()),
                expires_at_ms: Some(5),
            },
            user_id: Some("U2".into()),
            user_scopes: vec![],
            user: Some(Token {
                token: "xoxp-secret".into(),
                refresh_token: None,
                expires_at_ms: None,
            }),
            installed_at_ms: 1,
        }
    }

    #[test]
    fn the_tokens_come_out_and_go_back_whole() {
        let full = installation();
        let (tokens, bare) = Tokens::taken_from(&full);
        let json = serde_json::to_string(&bare).unwrap();
        assert!(!json.contains("secret"), "{json}");
        assert_eq!(tokens.bot, "xoxb-secret");
        assert_eq!(tokens.bot_refresh.as_deref(), Some("xoxe-secret"));
        assert!(!format!("{tokens:?}").contains("secret"));
        assert_eq!(tokens.put_into(bare), full);
    }

    #[test]
    fn a_ciphertext_opens_only_with_its_own_associated_data() {
        let key = [7u8; 32];
        let cipher = Aes256Gcm::new_from_slice(&key).unwrap();
        let nonce = [1u8; 12];
        let aad = associated("1.2", "install#1.2#WORKSPACE#T1");
        let text = cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: b"xoxb",
                    aad: &aad,
                },
            )
            .unwrap();
        let other = associated("1.2", "install#1.2#WORKSPACE#T2");
        assert!(
            cipher
                .decrypt(
                    Nonce::from_slice(&nonce),
                    Payload {
                        msg: &text,
                        aad: &other
                    }
                )
                .is_err()
        );
    }

    fn entry(id: &str, byte: u8, len: usize) -> String {
        use base64::Engine;
        format!(
            "{id}={}",
            base64::engine::general_purpose::STANDARD.encode(vec![byte; len])
        )
    }

    #[test]
    fn token_keys_are_read_from_lines_or_commas_the_first_current() {
        let text = format!(
            "# rotated 2026-12\n{}\n\n{}\n",
            entry("b", 2, 32),
            entry("a", 1, 32)
        );
        let keys = TokenKeys::parse(&text).unwrap();
        assert_eq!(keys.ids(), ["b", "a"]);
        assert_eq!(keys.current_id(), "b");
        let keys = TokenKeys::parse(&format!(
            " {} , {} ",
            entry("k-2", 2, 32),
            entry("k.1", 1, 32)
        ))
        .unwrap();
        assert_eq!(keys.ids(), ["k-2", "k.1"]);
        assert!(!format!("{keys:?}").contains(&entry("k-2", 2, 32)[4..]));
        let made = TokenKeys::new_entry("fresh");
        assert_eq!(TokenKeys::parse(&made).unwrap().ids(), ["fresh"]);
        assert_ne!(made, TokenKeys::new_entry("fresh"));
    }

    #[test]
    fn a_key_given_without_its_id_is_refused_without_printing_it() {
        use base64::Engine;
        // A key whose base64 is letters and digits only (a quarter of all keys): before its
        // padding `=` it reads as an id.
        let bare = base64::engine::general_purpose::STANDARD.encode((0u8..32).collect::<Vec<_>>());
        let short = base64::engine::general_purpose::STANDARD.encode([7u8; 16]);
        for text in [bare.clone(), format!("b={}\n{bare}", &bare), short.clone()] {
            let error = TokenKeys::parse(&text).unwrap_err();
            let said = error.to_string();
            assert!(
                !said.contains(bare.trim_end_matches('='))
                    && !said.contains(short.trim_end_matches('=')),
                "{said}"
            );
            assert!(matches!(error, TokenKeysError::NotAnEntry(_)), "{error:?}");
        }
    }

    #[test]
    fn malformed_token_keys_are_refused_without_printing_the_key() {
        let short = entry("a", 9, 16);
        let refused = [
            ("", TokenKeysError::Empty),
            (" , \n", TokenKeysError::Empty),
            ("no-equals-sign", TokenKeysError::NotAnEntry(1)),
            (
                &format!("{},x", entry("a", 1, 32)),
                TokenKeysError::NotAnEntry(2),
            ),
            (
                &format!("a b={}", &entry("a", 1, 32)[2..]),
                TokenKeysError::BadId(1),
            ),
            (
                &format!("={}", &entry("a", 1, 32)[2..]),
                TokenKeysError::BadId(1),
            ),
            ("a=not base64!", TokenKeysError::NotBase64("a".into())),
            (
                &short,
                TokenKeysError::WrongLength {
                    id: "a".into(),
                    len: 16,
                },
            ),
            (
                &format!("{},{}", entry("a", 1, 32), entry("a", 2, 32)),
                TokenKeysError::Duplicate("a".into()),
            ),
        ];
        for (text, error) in refused {
            let got = TokenKeys::parse(text).unwrap_err();
            assert_eq!(got, error, "{text:?}");
            let said = got.to_string();
            assert!(!said.contains(&short[2..]), "{said}");
        }
    }

    #[tokio::test]
    async fn tokens_sealed_under_a_key_open_after_rotation_and_only_for_their_item() {
        let a = Seal::local(TokenKeys::parse(&entry("a", 1, 32)).unwrap());
        let tokens = Tokens::taken_from(&installation()).0;
        let item = "install#1.2#WORKSPACE#T1";
        let sealed = a.seal("1.2", item, &tokens).await.unwrap().unwrap();
        assert_eq!(sealed.key, b"key:a");
        assert!(a.is_current(&sealed));
        let rotated = Seal::local(
            TokenKeys::parse(&format!("{},{}", entry("b", 2, 32), entry("a", 1, 32))).unwrap(),
        );
        assert_eq!(rotated.open("1.2", item, &sealed).await.unwrap(), tokens);
        assert!(!rotated.is_current(&sealed));
        let resealed = rotated.seal("1.2", item, &tokens).await.unwrap().unwrap();
        assert_eq!(resealed.key, b"key:b");
        // Bound to its item and app.
        assert!(matches!(
            rotated
                .open("1.2", "install#1.2#WORKSPACE#T2", &sealed)
                .await,
            Err(SealError::Tampered)
        ));
        assert!(matches!(
            rotated.open("9.9", item, &sealed).await,
            Err(SealError::Tampered)
        ));
        // A key id not given, or no keys at all: said so.
        let only_b = Seal::local(TokenKeys::parse(&entry("b", 2, 32)).unwrap());
        let missing = only_b.open("1.2", item, &sealed).await.unwrap_err();
        assert!(matches!(missing, SealError::UnknownKey { .. }));
        assert!(missing.to_string().contains("`a`"), "{missing}");
        let none = Seal::none().open("1.2", item, &sealed).await.unwrap_err();
        assert!(none.to_string().contains("SLACK_TOKEN_KEYS"), "{none}");
        // The same id with other bytes: does not open.
        let wrong = Seal::local(TokenKeys::parse(&entry("a", 3, 32)).unwrap());
        assert!(matches!(
            wrong.open("1.2", item, &sealed).await,
            Err(SealError::Tampered)
        ));
    }
}
