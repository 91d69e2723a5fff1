//! The keys an operator gives to seal the installations' tokens without KMS
//! (`SLACK_TOKEN_KEYS`, `SLACK_TOKEN_KEYS_FILE`): read and checked with the configuration, used by
//! the seal (`src/workspaces/seal.rs`). Never prints a key.

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{KeyInit, OsRng};

/// The longest key id.
const KEY_ID_MAX: usize = 64;

/// The keys the operator gives to seal tokens without KMS (`SLACK_TOKEN_KEYS`, or the file
/// `SLACK_TOKEN_KEYS_FILE` names): entries `ID=BASE64` (32 bytes, base64), one a line or
/// separated by commas, the first the current one (it seals; every one opens). Blank lines and
/// lines starting `#` are passed over. Its `Debug` names the ids, never a key.
#[derive(Clone)]
pub struct TokenKeys {
    keys: Vec<(String, [u8; 32])>,
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenKeys({} [redacted])", self.ids().join(", "))
    }
}

/// Why the keys given could not be read: never says a key's bytes.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenKeysError {
    /// No entry at all.
    #[error(
        "holds no key: give one or more KEY_ID=BASE64_OF_32_BYTES entries (make one with `slack-once new-token-key`)"
    )]
    Empty,
    /// An entry is not `ID=BASE64`.
    #[error("entry {0} is not KEY_ID=BASE64_OF_32_BYTES")]
    NotAnEntry(usize),
    /// An entry's id has characters other than letters, digits, `.`, `_` and `-`, or is longer
    /// than 64.
    #[error("entry {0}'s key id must be 1 to 64 letters, digits, '.', '_' or '-'")]
    BadId(usize),
    /// The key is not base64.
    #[error("key `{0}` is not base64")]
    NotBase64(String),
    /// The key is not 32 bytes (AES-256).
    #[error(
        "key `{id}` is {len} bytes, not 32 (AES-256): make one with `slack-once new-token-key`"
    )]
    WrongLength {
        /// The key's id.
        id: String,
        /// Its length.
        len: usize,
    },
    /// Two entries with one id.
    #[error("key id `{0}` is given twice: each key needs an id of its own")]
    Duplicate(String),
}

impl TokenKeys {
    /// The keys `text` gives (see [`TokenKeys`]).
    pub fn parse(text: &str) -> Result<Self, TokenKeysError> {
        use base64::Engine;
        let mut keys: Vec<(String, [u8; 32])> = Vec::new();
        let entries = text
            .split(['\n', ','])
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.starts_with('#'));
        for (index, entry) in entries.enumerate() {
            let number = index + 1;
            let (id, value) = entry
                .split_once('=')
                .ok_or(TokenKeysError::NotAnEntry(number))?;
            if value.trim().trim_start_matches('=').is_empty() {
                // A key given without its id: its padding read as the `=`, the key as the id,
                // which an error would print.
                return Err(TokenKeysError::NotAnEntry(number));
            }
            let id = id.trim();
            if id.is_empty()
                || id.len() > KEY_ID_MAX
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(TokenKeysError::BadId(number));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(value.trim())
                .map_err(|_| TokenKeysError::NotBase64(id.to_string()))?;
            let key: [u8; 32] =
                bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| TokenKeysError::WrongLength {
                        id: id.to_string(),
                        len: bytes.len(),
                    })?;
            if keys.iter().any(|(known, _)| known == id) {
                return Err(TokenKeysError::Duplicate(id.to_string()));
            }
            keys.push((id.to_string(), key));
        }
        if keys.is_empty() {
            return Err(TokenKeysError::Empty);
        }
        Ok(Self { keys })
    }

    /// A new random key named `id`, as an entry (`ID=BASE64`): what `new-token-key` prints.
    pub fn new_entry(id: &str) -> String {
        use base64::Engine;
        let key = Aes256Gcm::generate_key(&mut OsRng);
        format!(
            "{id}={}",
            base64::engine::general_purpose::STANDARD.encode(key)
        )
    }

    /// The current key's id (the first given): the one that seals.
    pub fn current_id(&self) -> &str {
        &self.keys[0].0
    }

    /// Every id, current first.
    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|(id, _)| id.as_str()).collect()
    }

    pub(crate) fn current(&self) -> (&str, &[u8; 32]) {
        let (id, key) = &self.keys[0];
        (id, key)
    }

    pub(crate) fn get(&self, id: &str) -> Option<&[u8; 32]> {
        self.keys
            .iter()
            .find(|(known, _)| known == id)
            .map(|(_, key)| key)
    }
}
