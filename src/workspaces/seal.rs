//! Tokens sealed at rest: envelope encryption with AWS KMS (`SLACK_TOKEN_KEY_ID`: a key id,
//! ARN or alias). An installation's tokens (bot, refresh, user) are encrypted here with
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

struct Held {
    app: String,
    item: String,
    plain: [u8; 32],
    wrapped: Vec<u8>,
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
            Some(held) => write!(f, "ReadyKey({} [redacted])", held.item),
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

/// Where tokens are sealed: KMS with the key `SLACK_TOKEN_KEY_ID` names, or nowhere.
pub struct Seal {
    kms: Option<Kms>,
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
        match &self.kms {
            Some(kms) => write!(f, "Seal(KMS {})", kms.key_id),
            None => f.write_str("Seal(none)"),
        }
    }
}

impl Seal {
    /// Tokens kept as they are.
    pub fn none() -> Self {
        Self { kms: None }
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
        match &self.kms {
            Some(kms) => {
                let (plain, wrapped) = kms.data_key(app, item).await?;
                Ok(ReadyKey {
                    held: Some(Held {
                        app: app.to_string(),
                        item: item.to_string(),
                        plain,
                        wrapped,
                    }),
                })
            }
            None => Ok(ReadyKey::none()),
        }
    }

    /// Whether tokens are sealed.
    pub fn seals(&self) -> bool {
        self.kms.is_some()
    }

    /// The key's name, where tokens are sealed.
    pub fn key_id(&self) -> Option<&str> {
        self.kms.as_ref().map(|k| k.key_id.as_str())
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
        let Some(kms) = &self.kms else {
            return Ok(None);
        };
        let (plain, wrapped) = match &ready.held {
            Some(held) if held.app == app && held.item == item => {
                (held.plain, held.wrapped.clone())
            }
            _ => kms.data_key(app, item).await?,
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
        let Some(kms) = &self.kms else {
            return Err(SealError::NoKey);
        };
        let plain = kms.unwrap_key(app, item, &sealed.key).await?;
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
}
