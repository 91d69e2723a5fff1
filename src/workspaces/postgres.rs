//! The installation store in PostgreSQL (`DATABASE_URL`): one row per app (its client id) and
//! installation in `slack_once_installations`, OAuth states' nonces in
//! `slack_once_oauth_states`, history reads' pacing in `slack_once_read_pace`
//! (`src/postgres/migrations/0002_installations.sql`). Its semantics are the memory and
//! DynamoDB stores' (the one contract test runs all three).
//!
//! - **Tokens sealed** as [`super::DynamoInstallations`] seals them ([`Seal`]: KMS, or the keys
//!   the operator gives), where a seal is configured: the row's `installation` then holds every
//!   token empty, and `sealed` holds them, under the same encryption context (the app and the
//!   item `install#CLIENT#WORKSPACE#T…`), so a row copied to another app's or workspace's key
//!   does not open. A row kept as it is (written before a seal was configured), or sealed under
//!   an older key than the current one, is sealed again under the current key at its first
//!   read, conditioned on the row as read.
//! - **No unscoped rows.** There is no PostgreSQL release before the app was in the key, so
//!   nothing is ever kept without the app: [`Place::Unscoped`] names no row here (`find` reads
//!   only the app's own row; a change at `Unscoped` changes nothing and says so;
//!   [`InstallationStore::tag_unscoped`] tags nothing).
//! - **Times** compared with a refresh's hold or a TTL are the database's
//!   (`coalesce($n, DB_NOW_MS)`, [`Database::now_param`]): a hold lasts what the caller asked
//!   (`until_ms - now_ms`) from the database's now.
//! - **Sent again.** A statement whose connection broke is sent once more ([`Database::run`]),
//!   and the writes whose answer matters recognise themselves: a save over the same row (sealed
//!   once, before the statement, so the second carries the same text), a refreshed pair over
//!   itself, a hold by its owner, a state spent by its spender. The others, sent again after
//!   their first run committed, find nothing left to do and say so, as the DynamoDB store's do
//!   after an SDK retry: an uninstall or a revocation reports nothing removed, a broken mark
//!   reports it marked already, and a history read reports the next one later (a read skipped,
//!   never one too many).
//!
//! Round trips: `find` 1 (2 the one time a row is sealed again at its read); `save`, `save_new`,
//! `take_refresh`, `release_refresh`, `store_refreshed`, `mark_broken`, `take_read` and
//! `consume_state` 1 each; `delete` and `revoke` 2 (a read, then a write conditioned on the row's
//! version as read; read again where it changed in between); `tag_unscoped` none.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_postgres::types::Type;

use super::seal::{ReadyKey, SEAL_FORMAT, Seal, SealError, Sealed, Tokens};
use super::{
    Installation, InstallationKey, InstallationStore, Owns, Place, RefreshHold, Revoked,
    StoreError, Stored, read_interval_ms,
};
use crate::postgres::{DB_NOW_MS, Database, DatabaseError, from_ms, ms};

/// How long a pacing row outlives the read it paces (then it counts as absent, and is swept).
const PACE_KEPT_MS: i64 = 3_600_000;
/// How long a spent state's nonce outlives the state's expiry.
const STATE_KEPT_MS: i64 = 60_000;
/// How many expired states a spend sweeps on its way.
const STATES_SWEPT_PER_SPEND: i64 = 100;

/// The installation store in PostgreSQL, shared by every instance of one app (and, under its
/// client id, by other apps on the same database).
pub struct PostgresInstallations {
    database: Database,
    /// The app's client id.
    app: String,
    /// Where the tokens are sealed (KMS, the operator's keys, or nowhere).
    seal: Arc<Seal>,
}

impl std::fmt::Debug for PostgresInstallations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresInstallations")
            .field("app", &self.app)
            .field("database", &self.database)
            .field("seal", &self.seal)
            .finish()
    }
}

/// An installation's row, as read.
struct Row {
    installation: String,
    sealed: Option<Vec<u8>>,
    sealed_key: Option<Vec<u8>>,
    app: Option<String>,
    broken: Option<String>,
    revision: i64,
    row_version: i64,
}

const ROW_COLUMNS: &str = "installation, sealed, sealed_key, app, broken, revision, row_version";

impl Row {
    fn of(row: &tokio_postgres::Row) -> Self {
        Self {
            installation: row.get(0),
            sealed: row.get(1),
            sealed_key: row.get(2),
            app: row.get(3),
            broken: row.get(4),
            revision: row.get(5),
            row_version: row.get(6),
        }
    }

    /// The row as stored, its tokens left as they are in it (empty where sealed).
    fn bare(&self) -> Result<Stored, StoreError> {
        let installation: Installation = serde_json::from_str(&self.installation)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        Ok(Stored {
            installation,
            broken: self.broken.clone(),
            revision: from_ms(self.revision),
            place: Place::Own,
            tag: self.app.clone(),
        })
    }

    fn sealed(&self) -> Option<Sealed> {
        match (&self.sealed, &self.sealed_key) {
            (Some(text), Some(key)) => Some(Sealed {
                text: text.clone(),
                key: key.clone(),
            }),
            _ => None,
        }
    }
}

/// What keeps an installation in its row: its JSON (tokens empty where sealed) and its sealed
/// tokens, if sealed.
struct Kept {
    json: String,
    sealed: Option<Vec<u8>>,
    sealed_key: Option<Vec<u8>>,
    seal: Option<i32>,
}

impl PostgresInstallations {
    /// The store of the app whose client id is `client_id` on `database` (migrated), its
    /// tokens kept as they are until [`Self::with_seal`].
    pub fn new(database: Database, client_id: impl Into<String>) -> Self {
        Self {
            database,
            app: client_id.into(),
            seal: Arc::new(Seal::none()),
        }
    }

    /// The same store, its tokens sealed by `seal` (KMS: `SLACK_TOKEN_KEY_ID`; the operator's
    /// keys: `SLACK_TOKEN_KEYS`).
    pub fn with_seal(mut self, seal: Arc<Seal>) -> Self {
        self.seal = seal;
        self
    }

    /// The item the tokens' encryption context names: the DynamoDB store's key of the row.
    fn item(&self, key: &InstallationKey) -> String {
        key.item_key(&self.app, Place::Own)
    }

    /// The app's row of `key`.
    async fn read(&self, key: &InstallationKey) -> Result<Option<Row>, StoreError> {
        let (app, scope) = (&self.app, &key.scope());
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM slack_once_installations WHERE client = $1 AND scope = $2"
        );
        let sql = &sql;
        let row = self
            .database
            .query(sql, &[(app, Type::TEXT), (scope, Type::TEXT)])
            .await
            .map_err(unavailable)?;
        Ok(row.first().map(Row::of))
    }

    /// The row as stored, its tokens opened where they are sealed.
    async fn opened(&self, key: &InstallationKey, row: &Row) -> Result<Stored, StoreError> {
        let mut stored = row.bare()?;
        if let Some(sealed) = row.sealed() {
            let tokens = self
                .seal
                .open(&self.app, &self.item(key), &sealed)
                .await
                .map_err(|e| match e {
                    SealError::Kms(_) => StoreError::Unavailable(Box::new(e)),
                    other => StoreError::Corrupt(crate::errors::error_chain(&other)),
                })?;
            stored.installation = tokens.put_into(stored.installation);
        }
        Ok(stored)
    }

    /// What keeps `installation` in its row: sealed where a seal is configured (with `ready`'s
    /// key where it holds one), as it is otherwise.
    async fn kept(
        &self,
        key: &InstallationKey,
        installation: &Installation,
        ready: &ReadyKey,
    ) -> Result<Kept, StoreError> {
        let (tokens, bare) = Tokens::taken_from(installation);
        let sealed = self
            .seal
            .seal_ready(ready, &self.app, &self.item(key), &tokens)
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        Ok(match sealed {
            Some(sealed) => Kept {
                json: json_of(&bare),
                sealed: Some(sealed.text),
                sealed_key: Some(sealed.key),
                seal: Some(SEAL_FORMAT as i32),
            },
            None => Kept {
                json: json_of(installation),
                sealed: None,
                sealed_key: None,
                seal: None,
            },
        })
    }

    /// Writes `installation` (`kept`) over the row of `key` only where it is still at
    /// `row_version`, with `also` (SQL `SET` clauses of its own, or `""`): whether written.
    async fn rewrite(
        &self,
        key: &InstallationKey,
        kept: &Kept,
        row_version: i64,
        also: &str,
    ) -> Result<bool, StoreError> {
        let (app, scope) = (&self.app, &key.scope());
        let sql = format!(
            "UPDATE slack_once_installations SET installation = $3, sealed = $4, \
             sealed_key = $5, seal = $6, row_version = row_version + 1{also} \
             WHERE client = $1 AND scope = $2 AND row_version = $7 RETURNING true"
        );
        let sql = &sql;
        let rows = self
            .database
            .query(
                sql,
                &[
                    (app, Type::TEXT),
                    (scope, Type::TEXT),
                    (&kept.json, Type::TEXT),
                    (&kept.sealed, Type::BYTEA),
                    (&kept.sealed_key, Type::BYTEA),
                    (&kept.seal, Type::INT4),
                    (&row_version, Type::INT8),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(!rows.is_empty())
    }

    /// Removes the row of `key` only where it is still at `row_version` and was installed
    /// before `before_ms`: whether removed.
    async fn remove(
        &self,
        key: &InstallationKey,
        row_version: i64,
        before_ms: u64,
    ) -> Result<bool, StoreError> {
        let (app, scope, before) = (&self.app, &key.scope(), &ms(before_ms));
        let rows = self
            .database
            .query(
                "DELETE FROM slack_once_installations WHERE client = $1 AND scope = $2 \
                         AND row_version = $3 AND installed_at < $4 RETURNING true",
                &[
                    (app, Type::TEXT),
                    (scope, Type::TEXT),
                    (&row_version, Type::INT8),
                    (before, Type::INT8),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(!rows.is_empty())
    }

    /// Seals again, under the current key, a row read kept as it is or sealed under an older
    /// key (`row`, opened as `stored`), conditioned on the row as read. A failure is no harm: the
    /// row is read as it is, and sealed again at a later read.
    async fn seal_as_read(&self, key: &InstallationKey, row: &Row, stored: &Stored) {
        if !self.seal.seals() || row.sealed().is_some_and(|s| self.seal.is_current(&s)) {
            return;
        }
        let sealing = async {
            let kept = self
                .kept(key, &stored.installation, &ReadyKey::none())
                .await?;
            self.rewrite(key, &kept, row.row_version, "").await
        };
        let sealed = tokio::time::timeout(super::dynamo::SEAL_AT_READ_BUDGET, sealing)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the seal or the database did not answer within the read's budget".into(),
                ))
            });
        let item = self.item(key);
        match sealed {
            Ok(true) => {
                crate::metrics::count("InstallationsSealedOnRead");
                tracing::info!(
                    installation = %item,
                    key = self.seal.key_id().unwrap_or_default(),
                    "an installation's tokens sealed under the current key at its read"
                );
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(
                installation = %item,
                error = %crate::errors::error_chain(&e),
                "an installation's tokens could not be sealed again now: read as they are, and \
                 sealed at a later read"
            ),
        }
    }

    /// Deletes up to `batch` of the app's OAuth states, and as many of its history-read pacing
    /// rows, past their expiry (on the database's clock, or `now_ms` on a given one), which
    /// count as absent: how many. What `sweep` runs beside the ledger's own.
    pub async fn sweep_expired(&self, now_ms: u64, batch: i64) -> Result<u64, StoreError> {
        let (app, now, batch) = (&self.app, &self.database.now_param(now_ms), &batch);
        let sql = format!(
            "WITH states AS (
               DELETE FROM slack_once_oauth_states WHERE ctid IN (
                 SELECT ctid FROM slack_once_oauth_states
                 WHERE client = $1 AND expires_at < coalesce($2, {DB_NOW_MS})
                 LIMIT $3 FOR UPDATE SKIP LOCKED)
               RETURNING 1),
             paces AS (
               DELETE FROM slack_once_read_pace WHERE ctid IN (
                 SELECT ctid FROM slack_once_read_pace
                 WHERE client = $1 AND expires_at < coalesce($2, {DB_NOW_MS})
                 LIMIT $3 FOR UPDATE SKIP LOCKED)
               RETURNING 1)
             SELECT (SELECT count(*) FROM states) + (SELECT count(*) FROM paces)"
        );
        let sql = &sql;
        let rows = self
            .database
            .query(
                sql,
                &[(app, Type::TEXT), (now, Type::INT8), (batch, Type::INT8)],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows.first().map_or(0, |r| from_ms(r.get::<_, i64>(0))))
    }
}

fn no_key() -> StoreError {
    StoreError::Corrupt("an installation without a team or enterprise".into())
}

fn unavailable(e: DatabaseError) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

fn json_of(installation: &Installation) -> String {
    serde_json::to_string(installation).expect("an installation serialises")
}

/// The columns a new row of `installation` is written with, after `client` and `scope`.
const INSERT: &str = "INSERT INTO slack_once_installations AS t
    (client, scope, installation, sealed, sealed_key, seal, rotation, installed_at, app)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

#[async_trait]
impl InstallationStore for PostgresInstallations {
    fn app(&self) -> &str {
        &self.app
    }

    async fn save(&self, installation: &Installation) -> Result<(), StoreError> {
        self.insert(installation, false).await.map(|_| ())
    }

    async fn save_new(&self, installation: &Installation) -> Result<bool, StoreError> {
        self.insert(installation, true).await
    }

    async fn find(&self, key: &InstallationKey) -> Result<Option<Stored>, StoreError> {
        let Some(row) = self.read(key).await? else {
            return Ok(None);
        };
        let stored = self.opened(key, &row).await?;
        self.seal_as_read(key, &row, &stored).await;
        Ok(Some(stored))
    }

    async fn delete(
        &self,
        key: &InstallationKey,
        place: Place,
        before_ms: u64,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError> {
        if place == Place::Unscoped {
            return Ok(false);
        }
        // Read and judged (whose it is needs no token: sealed ones stay sealed), then removed
        // only as read: a refresh or a reinstall in between changes its version, and it is read
        // again.
        for _ in 0..4 {
            let Some(row) = self.read(key).await? else {
                return Ok(false);
            };
            let stored = row.bare()?;
            if stored.installation.installed_at_ms >= before_ms || !owns(&stored) {
                return Ok(false);
            }
            if self.remove(key, row.row_version, before_ms).await? {
                return Ok(true);
            }
        }
        Err(StoreError::Unavailable(
            "the installation kept changing while it was uninstalled".into(),
        ))
    }

    async fn revoke(
        &self,
        key: &InstallationKey,
        place: Place,
        revoked: Revoked<'_>,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError> {
        if place == Place::Unscoped {
            return Ok(false);
        }
        let Revoked {
            users,
            bots,
            before_ms,
        } = revoked;
        for _ in 0..4 {
            let Some(row) = self.read(key).await? else {
                return Ok(false);
            };
            if !owns(&row.bare()?) {
                return Ok(false);
            }
            let mut installation = self.opened(key, &row).await?.installation;
            if installation.installed_at_ms >= before_ms {
                return Ok(false);
            }
            if installation
                .bot_user_id
                .as_ref()
                .is_some_and(|b| bots.contains(b))
            {
                if self.remove(key, row.row_version, before_ms).await? {
                    return Ok(true);
                }
                continue;
            }
            let names_user = installation
                .user_id
                .as_ref()
                .is_some_and(|u| users.contains(u));
            if installation.user.is_none() || !names_user {
                return Ok(false);
            }
            installation.user = None;
            let kept = self.kept(key, &installation, &ReadyKey::none()).await?;
            if self
                .rewrite(key, &kept, row.row_version, ", revision = revision + 1")
                .await?
            {
                return Ok(true);
            }
        }
        Err(StoreError::Unavailable(
            "the installation kept changing while its tokens were revoked".into(),
        ))
    }

    async fn take_refresh(
        &self,
        key: &InstallationKey,
        place: Place,
        rotation: &str,
        hold: RefreshHold<'_>,
    ) -> Result<bool, StoreError> {
        if place == Place::Unscoped {
            return Ok(false);
        }
        let RefreshHold {
            owner,
            now_ms,
            until_ms,
        } = hold;
        let (app, scope) = (&self.app, &key.scope());
        let now = &self.database.now_param(now_ms);
        let lasts = &ms(until_ms.saturating_sub(now_ms));
        let sql = format!(
            "UPDATE slack_once_installations
             SET refresh_owner = $3, refresh_until = coalesce($5, {DB_NOW_MS}) + $6
             WHERE client = $1 AND scope = $2 AND rotation = $4 AND broken IS NULL
               AND (refresh_until IS NULL OR refresh_until <= coalesce($5, {DB_NOW_MS})
                    OR refresh_owner = $3)
             RETURNING true"
        );
        let sql = &sql;
        let rows = self
            .database
            .query(
                sql,
                &[
                    (app, Type::TEXT),
                    (scope, Type::TEXT),
                    (&owner, Type::TEXT),
                    (&rotation, Type::TEXT),
                    (now, Type::INT8),
                    (lasts, Type::INT8),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(!rows.is_empty())
    }

    async fn ready_to_store(
        &self,
        key: &InstallationKey,
        place: Place,
    ) -> Result<ReadyKey, StoreError> {
        match place {
            Place::Own => self
                .seal
                .ready(&self.app, &self.item(key))
                .await
                .map_err(|e| StoreError::Unavailable(Box::new(e))),
            Place::Unscoped => Ok(ReadyKey::none()),
        }
    }

    async fn release_refresh(
        &self,
        key: &InstallationKey,
        place: Place,
        owner: &str,
    ) -> Result<(), StoreError> {
        if place == Place::Unscoped {
            return Ok(());
        }
        let (app, scope) = (&self.app, &key.scope());
        self.database
            .query(
                "UPDATE slack_once_installations
                         SET refresh_owner = NULL, refresh_until = NULL
                         WHERE client = $1 AND scope = $2 AND refresh_owner = $3",
                &[(app, Type::TEXT), (scope, Type::TEXT), (&owner, Type::TEXT)],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn store_refreshed(
        &self,
        key: &InstallationKey,
        place: Place,
        (replaced, revision): (&str, u64),
        owner: &str,
        refreshed: &Installation,
        ready: &ReadyKey,
    ) -> Result<bool, StoreError> {
        if place == Place::Unscoped {
            return Ok(false);
        }
        // Sealed once, before the statement: sent again, it carries the same row, and finds
        // itself (`rotation = $7`).
        let kept = &self.kept(key, refreshed, ready).await?;
        let (app, scope) = (&self.app, &key.scope());
        let new = &refreshed.bot.rotation();
        let revision = &ms(revision);
        let rows = self
            .database
            .query(
                "UPDATE slack_once_installations
                         SET installation = $3, sealed = $4, sealed_key = $5, seal = $6,
                             rotation = $7, refresh_owner = NULL, refresh_until = NULL,
                             row_version = row_version + 1
                         WHERE client = $1 AND scope = $2
                           AND ((rotation = $8 AND refresh_owner = $9 AND revision = $10)
                                OR rotation = $7)
                         RETURNING true",
                &[
                    (app, Type::TEXT),
                    (scope, Type::TEXT),
                    (&kept.json, Type::TEXT),
                    (&kept.sealed, Type::BYTEA),
                    (&kept.sealed_key, Type::BYTEA),
                    (&kept.seal, Type::INT4),
                    (new, Type::TEXT),
                    (&replaced, Type::TEXT),
                    (&owner, Type::TEXT),
                    (revision, Type::INT8),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(!rows.is_empty())
    }

    async fn mark_broken(
        &self,
        key: &InstallationKey,
        place: Place,
        rotation: &str,
        code: &str,
    ) -> Result<bool, StoreError> {
        if place == Place::Unscoped {
            return Ok(false);
        }
        let (app, scope) = (&self.app, &key.scope());
        let rows = self
            .database
            .query(
                "UPDATE slack_once_installations
                         SET broken = $3, refresh_owner = NULL, refresh_until = NULL
                         WHERE client = $1 AND scope = $2 AND rotation = $4 AND broken IS NULL
                         RETURNING true",
                &[
                    (app, Type::TEXT),
                    (scope, Type::TEXT),
                    (&code, Type::TEXT),
                    (&rotation, Type::TEXT),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(!rows.is_empty())
    }

    async fn take_read(
        &self,
        key: &InstallationKey,
        method: &str,
        now_ms: u64,
        per_minute: u32,
    ) -> Result<Option<u64>, StoreError> {
        let (app, scope) = (&self.app, &key.scope());
        let now = &self.database.now_param(now_ms);
        let interval = &ms(read_interval_ms(per_minute));
        // The outer SELECT sees the row as it was before the insert (one snapshot): where the
        // read was not taken, when the next is free.
        let sql = format!(
            "WITH now AS (SELECT coalesce($4::bigint, {DB_NOW_MS}) AS ms),
             taken AS (
               INSERT INTO slack_once_read_pace AS p (client, scope, method, next_read, expires_at)
               SELECT $1, $2, $3, now.ms + $5, now.ms + $5 + {PACE_KEPT_MS} FROM now
               ON CONFLICT (client, scope, method) DO UPDATE
               SET next_read = excluded.next_read, expires_at = excluded.expires_at
               WHERE p.next_read <= excluded.next_read - $5
               RETURNING p.next_read)
             SELECT (SELECT next_read FROM taken),
                    (SELECT next_read FROM slack_once_read_pace
                     WHERE client = $1 AND scope = $2 AND method = $3),
                    (SELECT ms FROM now)"
        );
        let sql = &sql;
        let rows = self
            .database
            .query(
                sql,
                &[
                    (app, Type::TEXT),
                    (scope, Type::TEXT),
                    (&method, Type::TEXT),
                    (now, Type::INT8),
                    (interval, Type::INT8),
                ],
            )
            .await
            .map_err(unavailable)?;
        let row = rows.first().ok_or_else(|| {
            StoreError::Unavailable("the pacing statement answered no row".into())
        })?;
        let (taken, held, now): (Option<i64>, Option<i64>, i64) =
            (row.get(0), row.get(1), row.get(2));
        if taken.is_some() {
            return Ok(None);
        }
        // Where another's read was taken meanwhile (not in this statement's snapshot), its
        // next is at least an interval from now.
        let free_at = held.filter(|h| *h > now).unwrap_or(now + interval);
        Ok(Some(from_ms(free_at)))
    }

    async fn tag_unscoped(
        &self,
        _key: &InstallationKey,
        _app_id: &str,
    ) -> Result<bool, StoreError> {
        // No row is kept without the app on this store: nothing to tag.
        Ok(false)
    }

    async fn consume_state(
        &self,
        nonce: &str,
        spender: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        let app = &self.app;
        let expires = &ms(expires_at_ms).saturating_add(STATE_KEPT_MS);
        let now = &self.database.now_param(crate::clock::now_ms());
        // Expired states of the app are swept on the way (never this nonce's row, which the
        // insert decides on).
        let sql = format!(
            "WITH swept AS (
               DELETE FROM slack_once_oauth_states WHERE ctid IN (
                 SELECT ctid FROM slack_once_oauth_states
                 WHERE client = $1 AND nonce <> $2 AND expires_at < coalesce($5, {DB_NOW_MS})
                 LIMIT {STATES_SWEPT_PER_SPEND} FOR UPDATE SKIP LOCKED))
             INSERT INTO slack_once_oauth_states AS s (client, nonce, spent_by, expires_at)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (client, nonce) DO UPDATE SET spent_by = s.spent_by
             WHERE s.spent_by = excluded.spent_by
             RETURNING true"
        );
        let sql = &sql;
        let rows = self
            .database
            .query(
                sql,
                &[
                    (app, Type::TEXT),
                    (&nonce, Type::TEXT),
                    (&spender, Type::TEXT),
                    (expires, Type::INT8),
                    (now, Type::INT8),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(!rows.is_empty())
    }
}

impl PostgresInstallations {
    /// Keeps `installation` in the app's row: over whatever is there (a reinstall: no hold,
    /// not broken, its revision from 0), or, `only_new`, only where there is none, or it is
    /// this very row (this write sent again after its answer was lost). Whether kept.
    async fn insert(
        &self,
        installation: &Installation,
        only_new: bool,
    ) -> Result<bool, StoreError> {
        let key = installation.key().ok_or_else(no_key)?;
        // Sealed once, before the statement: sent again, it carries the same row.
        let kept = &self.kept(&key, installation, &ReadyKey::none()).await?;
        let (app, scope) = (&self.app, &key.scope());
        let rotation = &installation.bot.rotation();
        let installed_at = &ms(installation.installed_at_ms);
        let app_id = &installation.app_id;
        let sql = match only_new {
            false => format!(
                "{INSERT} ON CONFLICT (client, scope) DO UPDATE SET
                   installation = excluded.installation, sealed = excluded.sealed,
                   sealed_key = excluded.sealed_key, seal = excluded.seal,
                   rotation = excluded.rotation, installed_at = excluded.installed_at,
                   app = excluded.app, refresh_owner = NULL, refresh_until = NULL,
                   broken = NULL, revision = 0, row_version = t.row_version + 1
                 RETURNING true"
            ),
            true => format!(
                "{INSERT} ON CONFLICT (client, scope) DO UPDATE SET row_version = t.row_version
                 WHERE t.installation = excluded.installation
                   AND t.sealed IS NOT DISTINCT FROM excluded.sealed
                 RETURNING true"
            ),
        };
        let sql = &sql;
        let rows = self
            .database
            .query(
                sql,
                &[
                    (app, Type::TEXT),
                    (scope, Type::TEXT),
                    (&kept.json, Type::TEXT),
                    (&kept.sealed, Type::BYTEA),
                    (&kept.sealed_key, Type::BYTEA),
                    (&kept.seal, Type::INT4),
                    (rotation, Type::TEXT),
                    (installed_at, Type::INT8),
                    (app_id, Type::TEXT),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(!rows.is_empty())
    }
}
