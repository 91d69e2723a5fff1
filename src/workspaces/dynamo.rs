//! The installation store in the ledger's DynamoDB table: one item per app and installation
//! (`install#CLIENT#WORKSPACE#T…`, `install#CLIENT#ENTERPRISE#E…`), without `expires_at`
//! (never expired by the table's TTL); OAuth states (`oauth-state#CLIENT#…`) and history-read
//! pacing (`install-pace#CLIENT#…`) with one. Items the previous release kept without the app
//! (`install#WORKSPACE#T…`) are read where the app has none, and written in place only as the
//! caller's ownership check allows (see [`super`]). Every write is one conditional request,
//! and each stays right when the SDK sends it again after its answer was lost.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::{
    Installation, InstallationKey, InstallationStore, Owns, Place, StoreError, Stored,
    read_interval_ms, state_key,
};

/// The attributes of an installation's item.
pub mod attr {
    pub const PK: &str = "pk";
    /// The installation as JSON (its tokens among it: the table is encrypted at rest, and only
    /// the function's role reads it).
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
}

/// The installation store in the ledger's DynamoDB table, shared by every instance of one app
/// (and, under keys of their own, by other apps sharing the table).
pub struct DynamoInstallations {
    client: Client,
    table: String,
    /// The app's client id.
    app: String,
}

impl DynamoInstallations {
    /// The store of the app whose client id is `app` in `table` (the ledger's), through
    /// `client`.
    pub fn new(client: Client, table: impl Into<String>, app: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            app: app.into(),
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

    /// The attributes of a new item for `installation`.
    fn item_of(
        &self,
        key: &InstallationKey,
        installation: &Installation,
    ) -> HashMap<String, AttributeValue> {
        let json = serde_json::to_string(installation).expect("an installation serialises");
        let mut item: HashMap<String, AttributeValue> = [
            (attr::PK, s(&self.key(key, Place::Own))),
            (attr::KIND, s("installation")),
            (attr::INSTALLATION, s(&json)),
            (attr::ROTATION, s(&installation.bot.rotation())),
            (attr::INSTALLED_AT, n(installation.installed_at_ms)),
            (attr::CLIENT, s(&self.app)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(app) = &installation.app_id {
            item.insert(attr::APP.into(), s(app));
        }
        item
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

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
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
            .set_item(Some(self.item_of(&key, installation)))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn save_new(&self, installation: &Installation) -> Result<bool, StoreError> {
        let key = installation.key().ok_or_else(|| {
            StoreError::Corrupt("an installation without a team or enterprise".into())
        })?;
        let item = self.item_of(&key, installation);
        let json = item[attr::INSTALLATION].clone();
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk) OR #installation = :json")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#installation", attr::INSTALLATION)
            .expression_attribute_values(":json", json)
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

    async fn find(&self, key: &InstallationKey) -> Result<Option<Stored>, StoreError> {
        if let Some(item) = self.get(key, Place::Own).await? {
            return stored_of(&item, Place::Own).map(Some);
        }
        match self.get(key, Place::Legacy).await? {
            Some(item) => stored_of(&item, Place::Legacy).map(Some),
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
        let mut request = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(attr::PK, s(&self.key(key, place)))
            .expression_attribute_names("#installed_at", attr::INSTALLED_AT)
            .expression_attribute_values(":before", n(before_ms));
        request = match place {
            Place::Own => request.condition_expression("#installed_at < :before"),
            // The previous release's item: only the one read and judged the asker's.
            Place::Legacy => {
                let Some(item) = self.get(key, place).await? else {
                    return Ok(false);
                };
                if !owns(&stored_of(&item, place)?) {
                    return Ok(false);
                }
                request
                    .condition_expression("#installed_at < :before AND #installation = :read")
                    .expression_attribute_names("#installation", attr::INSTALLATION)
                    .expression_attribute_values(":read", item[attr::INSTALLATION].clone())
            }
        };
        match request.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                Ok(false)
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn revoke(
        &self,
        key: &InstallationKey,
        place: Place,
        users: &[String],
        bots: &[String],
        before_ms: u64,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError> {
        // Read, then write conditioned on what was read (the installation's JSON): a refresh or
        // a reinstall in between makes the write fail, and it is read again.
        let item_key = self.key(key, place);
        for _ in 0..4 {
            let Some(item) = self.get(key, place).await? else {
                return Ok(false);
            };
            let read = item[attr::INSTALLATION].clone();
            let stored = stored_of(&item, place)?;
            if place == Place::Legacy && !owns(&stored) {
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
                let result = self
                    .client
                    .delete_item()
                    .table_name(&self.table)
                    .key(attr::PK, s(&item_key))
                    .condition_expression("#installation = :read")
                    .expression_attribute_names("#installation", attr::INSTALLATION)
                    .expression_attribute_values(":read", read)
                    .send()
                    .await;
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
            let json = serde_json::to_string(&installation).expect("an installation serialises");
            if self
                .update(
                    &item_key,
                    "SET #installation = :new ADD #revision :one",
                    "#installation = :read",
                    vec![(":new", s(&json)), (":read", read), (":one", n(1))],
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
        owner: &str,
        now_ms: u64,
        until_ms: u64,
    ) -> Result<bool, StoreError> {
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
    ) -> Result<bool, StoreError> {
        let json = serde_json::to_string(refreshed).expect("an installation serialises");
        self.update(
            &self.key(key, place),
            "SET #installation = :json, #rotation = :new REMOVE #refresh_owner, #refresh_until",
            "(#rotation = :replaced AND #refresh_owner = :owner AND \
              (attribute_not_exists(#revision) OR #revision = :revision)) OR #rotation = :new",
            vec![
                (":json", s(&json)),
                (":new", s(&refreshed.bot.rotation())),
                (":replaced", s(replaced)),
                (":owner", s(owner)),
                (":revision", n(revision)),
            ],
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

    async fn tag_legacy(&self, key: &InstallationKey, app_id: &str) -> Result<bool, StoreError> {
        // `app` beside the installation's JSON, which the previous release reads as ever.
        self.update(
            &self.key(key, Place::Legacy),
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
