//! The installation store in the ledger's DynamoDB table: one item per app and installation
//! (`install#CLIENT#WORKSPACE#T…`, `install#CLIENT#ENTERPRISE#E…`), without `expires_at`
//! (never expired by the table's TTL); OAuth states (`oauth-state#CLIENT#…`) and history-read
//! pacing (`install-pace#CLIENT#…`) with one. Unscoped items, kept without the app
//! (`install#WORKSPACE#T…`), are read where the app has none, and written in place only as the
//! caller's ownership check allows (see [`super`]). Every write is one conditional request,
//! and each stays right when the SDK sends it again after its answer was lost.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use aws_sdk_dynamodb::primitives::Blob;

use super::seal::{ReadyKey, SEAL_FORMAT, Seal, SealError, Sealed, Tokens};
use super::{
    Installation, InstallationKey, InstallationStore, Owns, Place, RefreshHold, Revoked,
    StoreError, Stored, read_interval_ms, state_key,
};

/// The attributes of an installation's item.
pub mod attr {
    pub const PK: &str = "pk";
    /// The installation as JSON. Its tokens are in it where no KMS key seals them (an unscoped
    /// item, or an item of a deployment without `SLACK_TOKEN_KEY_ID`: readable by anyone who
    /// can read the table); else every token is empty, and `sealed` holds them.
    pub const INSTALLATION: &str = "installation";
    /// Names the bot's refresh token ([`super::super::Token::rotation`]): what a refreshed
    /// pair is conditioned on.
    pub const ROTATION: &str = "rotation";
    pub const INSTALLED_AT: &str = "installed_at";
    pub const REFRESH_OWNER: &str = "refresh_owner";
    pub const REFRESH_UNTIL: &str = "refresh_until";
    pub const BROKEN: &str = "broken";
    pub const KIND: &str = "kind";
    /// The ledger's TTL attribute (epoch seconds): states and pacing only.
    pub const EXPIRES_AT: &str = "expires_at";
    pub const SPENT_BY: &str = "spent_by";
    pub const NEXT_READ: &str = "next_read";
    /// Counts the changes other than a refresh ([`super::super::Stored::revision`]).
    pub const REVISION: &str = "revision";
    /// The app's client id, on every item the store writes (operators and tools read it).
    pub const CLIENT: &str = "client";
    /// The Slack app's id (`A…`) of the installation, where the install named it.
    pub const APP: &str = "app";
    /// The installation's tokens, sealed ([`super::super::seal`]): the nonce, then the
    /// ciphertext and its tag (binary). `installation` then holds every token empty.
    pub const SEALED: &str = "sealed";
    /// The data key that sealed them, wrapped by KMS (binary).
    pub const SEALED_KEY: &str = "sealed_key";
    /// The sealed format ([`super::super::seal::SEAL_FORMAT`]).
    pub const SEAL: &str = "seal";
    /// On the app's sealing mark ([`super::sealing_mark_key`]): when `seal-installations` first
    /// ran (epoch ms).
    pub const SINCE: &str = "since";
}

/// The key of the app's sealing mark: `seal-installations` writes it before it moves anything,
/// saying that no release reading unscoped items in place runs any more. From then on a refresh
/// of an unscoped item (one a rolled-back or late previous release made since) stores its new
/// pair sealed.
pub fn sealing_mark_key(client_id: &str) -> String {
    format!("install-sealed#{client_id}")
}

/// The longest a read waits to seal the tokens of an item kept as it is (KMS down must not make
/// a request that reads it late for its acknowledgement).
pub const SEAL_AT_READ_BUDGET: std::time::Duration = std::time::Duration::from_millis(500);

/// The installation store in the ledger's DynamoDB table, shared by every instance of one app
/// (and, under keys of their own, by other apps sharing the table).
pub struct DynamoInstallations {
    client: Client,
    table: String,
    /// The app's client id.
    app: String,
    /// Where the tokens are sealed (KMS, or nowhere).
    seal: std::sync::Arc<Seal>,
}

/// What an update of an installation's item does beside keeping its tokens
/// ([`DynamoInstallations::update_kept`]): its own `SET`, `REMOVE` and `ADD` clauses (`""`:
/// none), its condition, and the values they name.
struct AlsoUpdated<'a> {
    set: &'a str,
    remove: &'a str,
    add: &'a str,
    condition: &'a str,
    values: Vec<(&'a str, AttributeValue)>,
}
impl DynamoInstallations {
    /// The store of the app whose client id is `app` in `table` (the ledger's), through
    /// `client`.
    pub fn new(client: Client, table: impl Into<String>, app: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            app: app.into(),
            seal: std::sync::Arc::new(Seal::none()),
        }
    }

    /// The same store, its tokens sealed by `seal` (KMS: `SLACK_TOKEN_KEY_ID`).
    pub fn with_seal(mut self, seal: std::sync::Arc<Seal>) -> Self {
        self.seal = seal;
        self
    }

    /// The item at `pk`, `place`, as stored: its tokens opened where they are sealed.
    async fn stored_of(
        &self,
        item: &HashMap<String, AttributeValue>,
        place: Place,
    ) -> Result<Stored, StoreError> {
        let mut stored = stored_of(item, place)?;
        let blob = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_b().ok())
                .map(|b| b.as_ref().to_vec())
        };
        if place == Place::Unscoped && self.sealed_by_another(item) {
            // Another app's refresh sealed it (its mark set): its tokens open only for that
            // app, and the item, which names its app, is not this one's.
            return Ok(stored);
        }
        if let (Some(text), Some(key)) = (blob(attr::SEALED), blob(attr::SEALED_KEY)) {
            let pk = item
                .get(attr::PK)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default();
            let tokens = self
                .seal
                .open(&self.app, &pk, &Sealed { text, key })
                .await
                .map_err(|e| match e {
                    SealError::Kms(_) => StoreError::Unavailable(Box::new(e)),
                    other => StoreError::Corrupt(crate::errors::error_chain(&other)),
                })?;
            stored.installation = tokens.put_into(stored.installation);
        }
        Ok(stored)
    }

    /// Whether `item` holds tokens sealed as this store seals now: not kept as they are, nor
    /// under an older key of the operator's than the current one ([`Seal::is_current`]).
    fn sealed_currently(&self, item: &HashMap<String, AttributeValue>) -> bool {
        let blob = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_b().ok())
                .map(|b| b.as_ref().to_vec())
        };
        match (blob(attr::SEALED), blob(attr::SEALED_KEY)) {
            (Some(text), Some(key)) => self.seal.is_current(&Sealed { text, key }),
            _ => false,
        }
    }

    /// Whether `item`, an unscoped item, holds tokens another app sealed (its refresh after its
    /// own sealing mark): they open only for that app, and the item is not this one's.
    fn sealed_by_another(&self, item: &HashMap<String, AttributeValue>) -> bool {
        item.contains_key(attr::SEALED)
            && item.get(attr::CLIENT).and_then(|v| v.as_s().ok()) != Some(&self.app)
    }

    /// The attributes that keep `installation` in the item `pk` at `place`: sealed at the app's
    /// own key when a key is set (the JSON then holds no token), as it is otherwise; at the
    /// unscoped key, where releases before the app was in the key read it in place, as it is
    /// unless `ready` holds a key (a refresh after the app's sealing mark:
    /// [`InstallationStore::ready_to_store`]); and those to remove. Sealed with `ready`'s key
    /// where it holds one for `pk`.
    async fn kept(
        &self,
        pk: &str,
        place: Place,
        installation: &Installation,
        ready: &ReadyKey,
    ) -> Result<(Vec<(&'static str, AttributeValue)>, Vec<&'static str>), StoreError> {
        let seals_here = match place {
            Place::Own => true,
            Place::Unscoped => ready.holds_key(),
        };
        let sealed = match seals_here {
            true => {
                let (tokens, bare) = Tokens::taken_from(installation);
                self.seal
                    .seal_ready(ready, &self.app, pk, &tokens)
                    .await
                    .map_err(|e| StoreError::Unavailable(Box::new(e)))?
                    .map(|sealed| (sealed, bare))
            }
            false => None,
        };
        Ok(match sealed {
            Some((sealed, bare)) => (
                vec![
                    (attr::INSTALLATION, s(&json_of(&bare))),
                    (attr::SEALED, AttributeValue::B(Blob::new(sealed.text))),
                    (attr::SEALED_KEY, AttributeValue::B(Blob::new(sealed.key))),
                    (attr::SEAL, n(SEAL_FORMAT)),
                    (attr::CLIENT, s(&self.app)),
                ],
                vec![],
            ),
            None => (
                vec![(attr::INSTALLATION, s(&json_of(installation)))],
                vec![attr::SEALED, attr::SEALED_KEY, attr::SEAL],
            ),
        })
    }

    /// Seals the tokens of `item`, an item at the app's own key read with its tokens as they
    /// are (`stored`), where a key is set: the first read after the key was set takes them out
    /// of the table. Only over the item as read; where KMS or the table fails, or takes longer
    /// than [`SEAL_AT_READ_BUDGET`], the item is read as it is, and sealed at a later read.
    async fn seal_as_read(&self, item: &HashMap<String, AttributeValue>, stored: &Stored) {
        if !self.seal.seals() || item.contains_key(attr::SEALED) {
            return;
        }
        let pk = pk_of(item);
        let (unchanged, values) = as_read(item);
        let no_key_ready = ReadyKey::none();
        let sealing = self.update_kept(
            pk,
            Place::Own,
            &stored.installation,
            AlsoUpdated {
                set: "",
                remove: "",
                add: "",
                condition: unchanged,
                values,
            },
            &no_key_ready,
        );
        // A write given up mid-way is no harm: conditioned on the item as read, it stores the
        // same tokens sealed, or nothing.
        let sealed = tokio::time::timeout(SEAL_AT_READ_BUDGET, sealing)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "KMS or the table did not answer within the read's budget".into(),
                ))
            });
        match sealed {
            Ok(true) => {
                crate::metrics::count("InstallationsSealedOnRead");
                tracing::info!(
                    installation = pk,
                    "an installation's tokens sealed at its read"
                );
            }
            // Changed since it was read: whatever wrote it sealed it, or the next read does.
            Ok(false) => {}
            Err(e) => tracing::warn!(
                installation = pk,
                error = %crate::errors::error_chain(&e),
                "an installation's tokens, kept as they are, could not be sealed now: read as \
                 they are, and sealed at a later read"
            ),
        }
    }

    fn key(&self, key: &InstallationKey, place: Place) -> String {
        key.item_key(&self.app, place)
    }

    /// The item at `place`, read strongly.
    async fn get(
        &self,
        key: &InstallationKey,
        place: Place,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(attr::PK, s(&self.key(key, place)))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(got
            .item
            .filter(|item| item.contains_key(attr::INSTALLATION)))
    }

    /// The attributes of a new item for `installation` at the app's own key.
    async fn item_of(
        &self,
        key: &InstallationKey,
        installation: &Installation,
    ) -> Result<HashMap<String, AttributeValue>, StoreError> {
        let pk = self.key(key, Place::Own);
        let (kept, _) = self
            .kept(&pk, Place::Own, installation, &ReadyKey::none())
            .await?;
        let mut item: HashMap<String, AttributeValue> = [
            (attr::PK, s(&pk)),
            (attr::KIND, s("installation")),
            (attr::ROTATION, s(&installation.bot.rotation())),
            (attr::INSTALLED_AT, n(installation.installed_at_ms)),
            (attr::CLIENT, s(&self.app)),
        ]
        .into_iter()
        .chain(kept)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(app) = &installation.app_id {
            item.insert(attr::APP.into(), s(app));
        }
        Ok(item)
    }

    /// Sets the attributes that keep `installation` at `pk` (see [`Self::kept`]) in an update
    /// that also does `set` and `remove`, conditioned on `condition`; sealed with `ready`'s key
    /// where it holds one.
    async fn update_kept(
        &self,
        pk: &str,
        place: Place,
        installation: &Installation,
        with: AlsoUpdated<'_>,
        ready: &ReadyKey,
    ) -> Result<bool, StoreError> {
        let AlsoUpdated {
            set,
            remove,
            add,
            condition,
            mut values,
        } = with;
        let (kept, removed) = self.kept(pk, place, installation, ready).await?;
        let mut sets: Vec<String> = set
            .split(", ")
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        let mut removes: Vec<String> = remove
            .split(", ")
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        let placeholders: Vec<String> = kept
            .iter()
            .map(|(name, _)| format!(":kept_{name}"))
            .collect();
        for ((name, value), placeholder) in kept.into_iter().zip(&placeholders) {
            sets.push(format!("#{name} = {placeholder}"));
            values.push((placeholder.as_str(), value));
        }
        removes.extend(removed.iter().map(|name| format!("#{name}")));
        let mut update = format!("SET {}", sets.join(", "));
        if !removes.is_empty() {
            update.push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        if !add.is_empty() {
            update.push_str(&format!(" ADD {add}"));
        }
        self.update(pk, &update, condition, values).await
    }

    /// A data key for the refresh of the unscoped item of `key`, where the app's sealing mark is
    /// set and tokens are sealed: the refreshed pair is then stored sealed, in place. Without
    /// the mark, none (the pair is kept as it is, for the previous release that reads it there).
    async fn ready_after_mark(&self, key: &InstallationKey) -> Result<ReadyKey, StoreError> {
        if !self.seal.seals() || !self.sealing_marked().await? {
            return Ok(ReadyKey::none());
        }
        self.seal
            .ready(&self.app, &self.key(key, Place::Unscoped))
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))
    }

    /// The data key a change other than a refresh (a revocation) writes the unscoped item
    /// `item` of `key` back with: an item sealed as read, or any after the app's sealing mark,
    /// stays sealed (its tokens never go back into the table as they are); none at the app's own
    /// key, which [`Self::kept`] always seals where a key is set.
    async fn ready_for_rewrite(
        &self,
        key: &InstallationKey,
        place: Place,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<ReadyKey, StoreError> {
        match place {
            Place::Own => Ok(ReadyKey::none()),
            Place::Unscoped if item.contains_key(attr::SEALED) => self
                .seal
                .ready(&self.app, &self.key(key, place))
                .await
                .map_err(|e| StoreError::Unavailable(Box::new(e))),
            Place::Unscoped => self.ready_after_mark(key).await,
        }
    }

    /// Whether the app's sealing mark is set ([`sealing_mark_key`]).
    async fn sealing_marked(&self) -> Result<bool, StoreError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(attr::PK, s(&sealing_mark_key(&self.app)))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(got.item.is_some())
    }

    /// Sets the app's sealing mark (kept where it is set already).
    async fn mark_sealing(&self) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, s(&sealing_mark_key(&self.app)))
            .update_expression("SET #since = if_not_exists(#since, :now), #client = :client")
            .expression_attribute_names("#since", attr::SINCE)
            .expression_attribute_names("#client", attr::CLIENT)
            .expression_attribute_values(":now", n(crate::clock::now_ms()))
            .expression_attribute_values(":client", s(&self.app))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Seals every installation of the app still kept as it is (or sealed under an older key of
    /// the operator's than the current one), and moves its unscoped items
    /// (keyed without the app) to the app's own key, sealed, removing each: what
    /// `seal-installations` does once no release that reads unscoped items in place runs.
    /// `app_id` says which unscoped items are this app's (those that name it); without it, it is
    /// learnt from the app's own items. An item that names no app (an import), or changes while
    /// this runs, is left and reported. Before anything, sets the app's sealing mark, so that a
    /// refresh of an unscoped item made since stores its pair sealed. With `dry_run`, only
    /// reports.
    pub async fn seal_all(
        &self,
        app_id: Option<&str>,
        dry_run: bool,
    ) -> Result<Sealing, StoreError> {
        if !self.seal.seals() {
            return Err(StoreError::Unavailable(
                "no token key: set SLACK_TOKEN_KEY_ID (the stack's output TokenKeyId) or \
                 SLACK_TOKEN_KEYS"
                    .into(),
            ));
        }
        if !dry_run {
            self.mark_sealing().await?;
        }
        let items = self.scan_installations().await?;
        let own_prefix = format!("install#{}#", self.app);
        let app_id = app_id.map(str::to_string).or_else(|| {
            items
                .iter()
                .filter(|i| pk_of(i).starts_with(&own_prefix))
                .find_map(|i| i.get(attr::APP).and_then(|v| v.as_s().ok()).cloned())
        });
        let mut report = Sealing {
            app_id: app_id.clone(),
            ..Sealing::default()
        };
        for item in items {
            let pk = pk_of(&item).to_string();
            let unscoped_key = unscoped_key_of(&pk);
            if pk.starts_with(&own_prefix) {
                if self.sealed_currently(&item) {
                    report.sealed_already += 1;
                    continue;
                }
                if !dry_run {
                    let stored = self.stored_of(&item, Place::Own).await?;
                    let (unchanged, values) = as_read(&item);
                    let sealed = self
                        .update_kept(
                            &pk,
                            Place::Own,
                            &stored.installation,
                            AlsoUpdated {
                                set: "",
                                remove: "",
                                add: "",
                                condition: unchanged,
                                values,
                            },
                            &ReadyKey::none(),
                        )
                        .await?;
                    if !sealed {
                        report.changed.push(pk);
                        continue;
                    }
                }
                report.sealed.push(pk);
            } else if let Some(key) = unscoped_key {
                // Whatever app it names (an `--app` given by mistake), tokens this app cannot
                // open are never moved: the move would keep them empty and remove the only copy.
                if self.sealed_by_another(&item) {
                    report.others += 1;
                    continue;
                }
                let stored = self.stored_of(&item, Place::Unscoped).await?;
                let named = stored.installation.app_id.clone().or(stored.tag.clone());
                match (&named, &app_id) {
                    (Some(named), Some(ours)) if named == ours => {}
                    (Some(_), _) => {
                        report.others += 1;
                        continue;
                    }
                    (None, _) => {
                        report.undecided.push(pk);
                        continue;
                    }
                }
                if !dry_run && !self.move_unscoped(&key, &item, stored).await? {
                    report.changed.push(pk);
                    continue;
                }
                report.moved.push(pk);
            } else {
                report.others += 1;
            }
        }
        Ok(report)
    }

    /// Every installation's item in the table (`install#…`: every app's, and the unscoped
    /// ones), read strongly.
    async fn scan_installations(&self) -> Result<Vec<HashMap<String, AttributeValue>>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(#pk, :install)")
                .expression_attribute_names("#pk", attr::PK)
                .expression_attribute_values(":install", s("install#"))
                .set_exclusive_start_key(start)
                .consistent_read(true)
                .send()
                .await
                .map_err(unavailable)?;
            items.extend(page.items().iter().cloned());
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(items);
            }
        }
    }

    /// Moves the unscoped item of `key` (as read: `item`, `stored`) to the app's own
    /// key, sealed, in one transaction that removes it only as read; where the app has an item
    /// of its own already (a reinstall since), only removes it. Whether done.
    async fn move_unscoped(
        &self,
        key: &InstallationKey,
        item: &HashMap<String, AttributeValue>,
        stored: Stored,
    ) -> Result<bool, StoreError> {
        let (unchanged, values) = as_read(item);
        // Not while a refresh holds its lease (it is about to store a new pair there).
        let mut remove = aws_sdk_dynamodb::types::Delete::builder()
            .table_name(&self.table)
            .key(attr::PK, s(&self.key(key, Place::Unscoped)))
            .condition_expression(format!(
                "{unchanged} AND \
                 (attribute_not_exists(#refresh_until) OR #refresh_until < :now)"
            ))
            .expression_attribute_names("#installation", attr::INSTALLATION)
            .expression_attribute_names("#sealed", attr::SEALED)
            .expression_attribute_names("#refresh_until", attr::REFRESH_UNTIL)
            .expression_attribute_values(":now", n(crate::clock::now_ms()));
        for (name, value) in values {
            remove = remove.expression_attribute_values(name, value);
        }
        let remove = remove.build().map_err(unavailable)?;
        let own = self.get(key, Place::Own).await?;
        let mut transaction = self.client.transact_write_items();
        if own.is_none() {
            let mut moved = self.item_of(key, &stored.installation).await?;
            if let Some(code) = &stored.broken {
                moved.insert(attr::BROKEN.into(), s(code));
            }
            moved.insert(attr::REVISION.into(), n(stored.revision));
            let put = aws_sdk_dynamodb::types::Put::builder()
                .table_name(&self.table)
                .set_item(Some(moved))
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK)
                .build()
                .map_err(unavailable)?;
            transaction = transaction.transact_items(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .put(put)
                    .build(),
            );
        }
        let sent = transaction
            .transact_items(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .delete(remove)
                    .build(),
            )
            .send()
            .await;
        written(sent)
    }

    /// A conditional update: `Ok(false)` when its condition failed.
    async fn update(
        &self,
        key: &str,
        update: &str,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<bool, StoreError> {
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, s(key))
            .update_expression(update)
            .condition_expression(condition)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::None);
        for (placeholder, name) in named(&[update, condition]) {
            request = request.expression_attribute_names(placeholder, name);
        }
        for (name, value) in values {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                Ok(false)
            }
            Err(e) => Err(unavailable(e)),
        }
    }
}

/// The `#name` placeholders `expressions` use, each with its attribute.
fn named(expressions: &[&str]) -> Vec<(String, &'static str)> {
    const ALL: &[&str] = &[
        attr::PK,
        attr::INSTALLATION,
        attr::ROTATION,
        attr::INSTALLED_AT,
        attr::REFRESH_OWNER,
        attr::REFRESH_UNTIL,
        attr::BROKEN,
        attr::KIND,
        attr::EXPIRES_AT,
        attr::SPENT_BY,
        attr::NEXT_READ,
        attr::REVISION,
        attr::CLIENT,
        attr::APP,
        attr::SEALED,
        attr::SEALED_KEY,
        attr::SEAL,
    ];
    ALL.iter()
        .filter(|name| {
            let placeholder = format!("#{name}");
            expressions.iter().any(|e| {
                e.match_indices(&placeholder).any(|(i, _)| {
                    !e[i + placeholder.len()..]
                        .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                })
            })
        })
        .map(|name| (format!("#{name}"), *name))
        .collect()
}

/// What [`DynamoInstallations::seal_all`] found and did.
#[derive(Clone, Debug, Default)]
pub struct Sealing {
    /// The app's id the unscoped items were judged by, if known.
    pub app_id: Option<String>,
    /// The app's own items sealed (with `dry_run`: to seal).
    pub sealed: Vec<String>,
    /// The app's unscoped items moved to its own key, sealed (or to move).
    pub moved: Vec<String>,
    /// The app's own items sealed already.
    pub sealed_already: usize,
    /// Other apps' items, passed over.
    pub others: usize,
    /// Unscoped items that name no app: left (`import-token` with their token
    /// moves them).
    pub undecided: Vec<String>,
    /// Items that changed while this ran: left (run it again).
    pub changed: Vec<String>,
}

/// The condition that an item is still as `item` was read, and its values: the same
/// installation JSON and the same sealed tokens (a sealed item's JSON holds none of its
/// tokens, so two items that differ only in their tokens have one JSON), or still no sealed
/// tokens where it had none. It names `#installation` and `#sealed`, `:read` and
/// `:read_sealed`.
fn as_read(
    item: &HashMap<String, AttributeValue>,
) -> (&'static str, Vec<(&'static str, AttributeValue)>) {
    let json = item
        .get(attr::INSTALLATION)
        .cloned()
        .unwrap_or(AttributeValue::Null(true));
    match item.get(attr::SEALED) {
        Some(sealed) => (
            "#installation = :read AND #sealed = :read_sealed",
            vec![(":read", json), (":read_sealed", sealed.clone())],
        ),
        None => (
            "#installation = :read AND attribute_not_exists(#sealed)",
            vec![(":read", json)],
        ),
    }
}

fn pk_of(item: &HashMap<String, AttributeValue>) -> &str {
    item.get(attr::PK)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .unwrap_or_default()
}

/// The installation the unscoped item `pk` keeps (`install#WORKSPACE#T…`,
/// `install#ENTERPRISE#E…`), if it is one.
fn unscoped_key_of(pk: &str) -> Option<InstallationKey> {
    let rest = pk.strip_prefix("install#")?;
    let (scope, id) = rest.split_once('#')?;
    if id.contains('#') || id.is_empty() {
        return None;
    }
    match scope {
        "WORKSPACE" => Some(InstallationKey::Workspace(id.to_string())),
        "ENTERPRISE" => Some(InstallationKey::Enterprise(id.to_string())),
        _ => None,
    }
}

fn json_of(installation: &Installation) -> String {
    serde_json::to_string(installation).expect("an installation serialises")
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A transaction's answer: `Ok(false)` when a condition of it failed (nothing written).
fn written<T>(
    sent: Result<
        T,
        SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError>,
    >,
) -> Result<bool, StoreError> {
    match sent {
        Ok(_) => Ok(true),
        Err(SdkError::ServiceError(e))
            if matches!(
                e.err(),
                aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(_)
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(unavailable(e)),
    }
}

fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

fn stored_of(item: &HashMap<String, AttributeValue>, place: Place) -> Result<Stored, StoreError> {
    let json = item
        .get(attr::INSTALLATION)
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| StoreError::Corrupt("no installation attribute".into()))?;
    let installation: Installation =
        serde_json::from_str(json).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(Stored {
        installation,
        broken: item.get(attr::BROKEN).and_then(|v| v.as_s().ok()).cloned(),
        revision: item
            .get(attr::REVISION)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        place,
        tag: item.get(attr::APP).and_then(|v| v.as_s().ok()).cloned(),
    })
}

#[async_trait]
impl InstallationStore for DynamoInstallations {
    fn app(&self) -> &str {
        &self.app
    }

    async fn save(&self, installation: &Installation) -> Result<(), StoreError> {
        let key = installation.key().ok_or_else(|| {
            StoreError::Corrupt("an installation without a team or enterprise".into())
        })?;
        // A put replaces the whole item: a reinstall's tokens, no lease, not broken.
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.item_of(&key, installation).await?))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn save_new(&self, installation: &Installation) -> Result<bool, StoreError> {
        let key = installation.key().ok_or_else(|| {
            StoreError::Corrupt("an installation without a team or enterprise".into())
        })?;
        let item = self.item_of(&key, installation).await?;
        // Or over itself: this put sent again after its answer was lost.
        let (itself, values) = as_read(&item);
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(format!("attribute_not_exists(#pk) OR ({itself})"))
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#installation", attr::INSTALLATION)
            .expression_attribute_names("#sealed", attr::SEALED);
        for (name, value) in values {
            request = request.expression_attribute_values(name, value);
        }
        let result = request.send().await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                Ok(false)
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn find(&self, key: &InstallationKey) -> Result<Option<Stored>, StoreError> {
        if let Some(item) = self.get(key, Place::Own).await? {
            let stored = self.stored_of(&item, Place::Own).await?;
            self.seal_as_read(&item, &stored).await;
            return Ok(Some(stored));
        }
        match self.get(key, Place::Unscoped).await? {
            Some(item) => self.stored_of(&item, Place::Unscoped).await.map(Some),
            None => Ok(None),
        }
    }

    async fn delete(
        &self,
        key: &InstallationKey,
        place: Place,
        before_ms: u64,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError> {
        // Read and judged (whose it is needs no token: sealed ones stay sealed), then removed
        // only as read: a refresh or a reinstall in between makes the write fail, and it is
        // read again.
        for _ in 0..4 {
            let Some(item) = self.get(key, place).await? else {
                return Ok(false);
            };
            let stored = stored_of(&item, place)?;
            if stored.installation.installed_at_ms >= before_ms || !owns(&stored) {
                return Ok(false);
            }
            let (unchanged, values) = as_read(&item);
            let mut request = self
                .client
                .delete_item()
                .table_name(&self.table)
                .key(attr::PK, s(&self.key(key, place)))
                .condition_expression(format!("#installed_at < :before AND {unchanged}"))
                .expression_attribute_names("#installed_at", attr::INSTALLED_AT)
                .expression_attribute_names("#installation", attr::INSTALLATION)
                .expression_attribute_names("#sealed", attr::SEALED)
                .expression_attribute_values(":before", n(before_ms));
            for (name, value) in values {
                request = request.expression_attribute_values(name, value);
            }
            match request.send().await {
                Ok(_) => return Ok(true),
                Err(SdkError::ServiceError(e))
                    if e.err().is_conditional_check_failed_exception() =>
                {
                    continue;
                }
                Err(e) => return Err(unavailable(e)),
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
        let Revoked {
            users,
            bots,
            before_ms,
        } = revoked;
        // Read, then write conditioned on what was read (the installation's JSON): a refresh or
        // a reinstall in between makes the write fail, and it is read again.
        let item_key = self.key(key, place);
        for _ in 0..4 {
            let Some(item) = self.get(key, place).await? else {
                return Ok(false);
            };
            let (unchanged, read) = as_read(&item);
            let stored = self.stored_of(&item, place).await?;
            if !owns(&stored) {
                return Ok(false);
            }
            let mut installation = stored.installation;
            if installation.installed_at_ms >= before_ms {
                return Ok(false);
            }
            if installation
                .bot_user_id
                .as_ref()
                .is_some_and(|b| bots.contains(b))
            {
                let mut request = self
                    .client
                    .delete_item()
                    .table_name(&self.table)
                    .key(attr::PK, s(&item_key))
                    .condition_expression(unchanged)
                    .expression_attribute_names("#installation", attr::INSTALLATION)
                    .expression_attribute_names("#sealed", attr::SEALED);
                for (name, value) in read {
                    request = request.expression_attribute_values(name, value);
                }
                let result = request.send().await;
                match result {
                    Ok(_) => return Ok(true),
                    Err(SdkError::ServiceError(e))
                        if e.err().is_conditional_check_failed_exception() =>
                    {
                        continue;
                    }
                    Err(e) => return Err(unavailable(e)),
                }
            }
            let names_user = installation
                .user_id
                .as_ref()
                .is_some_and(|u| users.contains(u));
            if installation.user.is_none() || !names_user {
                return Ok(false);
            }
            installation.user = None;
            let ready = self.ready_for_rewrite(key, place, &item).await?;
            if self
                .update_kept(
                    &item_key,
                    place,
                    &installation,
                    AlsoUpdated {
                        set: "",
                        remove: "",
                        add: "#revision :one",
                        condition: unchanged,
                        values: read.into_iter().chain([(":one", n(1))]).collect(),
                    },
                    &ready,
                )
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
        let RefreshHold {
            owner,
            now_ms,
            until_ms,
        } = hold;
        self.update(
            &self.key(key, place),
            "SET #refresh_owner = :owner, #refresh_until = :until",
            "#rotation = :rotation AND attribute_not_exists(#broken) AND \
             (attribute_not_exists(#refresh_until) OR #refresh_until <= :now \
              OR #refresh_owner = :owner)",
            vec![
                (":owner", s(owner)),
                (":until", n(until_ms)),
                (":rotation", s(rotation)),
                (":now", n(now_ms)),
            ],
        )
        .await
    }

    async fn ready_to_store(
        &self,
        key: &InstallationKey,
        place: Place,
    ) -> Result<ReadyKey, StoreError> {
        match place {
            Place::Own => self
                .seal
                .ready(&self.app, &self.key(key, place))
                .await
                .map_err(|e| StoreError::Unavailable(Box::new(e))),
            Place::Unscoped => self.ready_after_mark(key).await,
        }
    }

    async fn release_refresh(
        &self,
        key: &InstallationKey,
        place: Place,
        owner: &str,
    ) -> Result<(), StoreError> {
        self.update(
            &self.key(key, place),
            "REMOVE #refresh_owner, #refresh_until",
            "#refresh_owner = :owner",
            vec![(":owner", s(owner))],
        )
        .await
        .map(|_| ())
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
        self.update_kept(
            &self.key(key, place),
            place,
            refreshed,
            AlsoUpdated {
                set: "#rotation = :new",
                remove: "#refresh_owner, #refresh_until",
                add: "",
                condition: "(#rotation = :replaced AND #refresh_owner = :owner AND \
                            (attribute_not_exists(#revision) OR #revision = :revision)) \
                            OR #rotation = :new",
                values: vec![
                    (":new", s(&refreshed.bot.rotation())),
                    (":replaced", s(replaced)),
                    (":owner", s(owner)),
                    (":revision", n(revision)),
                ],
            },
            ready,
        )
        .await
    }

    async fn mark_broken(
        &self,
        key: &InstallationKey,
        place: Place,
        rotation: &str,
        code: &str,
    ) -> Result<bool, StoreError> {
        self.update(
            &self.key(key, place),
            "SET #broken = :code REMOVE #refresh_owner, #refresh_until",
            "#rotation = :rotation AND attribute_not_exists(#broken)",
            vec![(":code", s(code)), (":rotation", s(rotation))],
        )
        .await
    }

    async fn take_read(
        &self,
        key: &InstallationKey,
        method: &str,
        now_ms: u64,
        per_minute: u32,
    ) -> Result<Option<u64>, StoreError> {
        let next = now_ms + read_interval_ms(per_minute);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, s(&key.pace_key(&self.app, method)))
            .update_expression("SET #next_read = :next, #expires_at = :expires")
            .condition_expression("attribute_not_exists(#next_read) OR #next_read <= :now")
            .expression_attribute_names("#next_read", attr::NEXT_READ)
            .expression_attribute_names("#expires_at", attr::EXPIRES_AT)
            .expression_attribute_values(":next", n(next))
            .expression_attribute_values(":now", n(now_ms))
            .expression_attribute_values(":expires", n(next / 1000 + 3600))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(None),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let free_at = match e.err() {
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(failed) => failed
                        .item()
                        .and_then(|i| i.get(attr::NEXT_READ))
                        .and_then(|v| v.as_n().ok())
                        .and_then(|v| v.parse::<u64>().ok()),
                    _ => None,
                };
                Ok(Some(free_at.unwrap_or(next)))
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn tag_unscoped(&self, key: &InstallationKey, app_id: &str) -> Result<bool, StoreError> {
        // `app` beside the installation's JSON, which releases that read unscoped items in
        // place read as ever.
        self.update(
            &self.key(key, Place::Unscoped),
            "SET #app = :app",
            "attribute_exists(#installation) AND attribute_not_exists(#app)",
            vec![(":app", s(app_id))],
        )
        .await
    }

    async fn consume_state(
        &self,
        nonce: &str,
        spender: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(attr::PK, s(&state_key(&self.app, nonce)))
            .item(attr::CLIENT, s(&self.app))
            .item(attr::KIND, s("oauth_state"))
            .item(attr::SPENT_BY, s(spender))
            .item(attr::EXPIRES_AT, n(expires_at_ms.div_ceil(1000) + 60))
            .condition_expression("attribute_not_exists(#pk) OR #spent_by = :spender")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#spent_by", attr::SPENT_BY)
            .expression_attribute_values(":spender", s(spender))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                Ok(false)
            }
            Err(e) => Err(unavailable(e)),
        }
    }
}
