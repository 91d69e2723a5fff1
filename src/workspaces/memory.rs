//! The installation store in memory: local mode without `DEDUP_TABLE`, and tests. Its items are
//! keyed as the DynamoDB store keys them, so that two apps' stores on one memory
//! ([`MemoryInstallations::for_app`]) keep apart as they do in a shared table.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    Installation, InstallationKey, InstallationStore, Owns, Place, RefreshHold, Revoked,
    StoreError, Stored, read_interval_ms, state_key,
};

#[derive(Clone)]
struct Item {
    stored: Stored,
    refresh: Option<(String, u64)>,
}

#[derive(Default)]
struct Shared {
    /// Item key → installation.
    items: Mutex<HashMap<String, Item>>,
    /// State key → (expires_at_ms, spent by).
    states: Mutex<HashMap<String, (u64, Option<String>)>>,
    /// Pace key → next read free at (epoch ms).
    reads: Mutex<HashMap<String, u64>>,
}

/// The installation store in memory: this process only, lost when it ends.
#[derive(Clone)]
pub struct MemoryInstallations {
    app: String,
    shared: Arc<Shared>,
}

impl Default for MemoryInstallations {
    fn default() -> Self {
        Self::new()
    }
}

/// The app of a store made with [`MemoryInstallations::new`].
pub const LOCAL_APP: &str = "local";

impl MemoryInstallations {
    /// An empty store, of the app `local` (a client id no app has).
    pub fn new() -> Self {
        Self {
            app: LOCAL_APP.to_string(),
            shared: Arc::default(),
        }
    }

    /// An empty store of the app whose client id is `client_id`.
    pub fn of_app(client_id: &str) -> Self {
        Self::new().for_app(client_id)
    }

    /// The store of the app `client_id` on the same memory (two apps sharing one table).
    pub fn for_app(&self, client_id: &str) -> Self {
        Self {
            app: client_id.to_string(),
            shared: self.shared.clone(),
        }
    }

    /// Every installation kept, for tests (every app's, at either place).
    pub fn all(&self) -> Vec<Stored> {
        let items = self.shared.items.lock().expect("store lock");
        items.values().map(|i| i.stored.clone()).collect()
    }

    /// Keeps `installation` as an unscoped item, without the app ([`Place::Unscoped`]), as
    /// releases before the app was in the key kept it: for tests of what is done with such
    /// items.
    pub fn save_unscoped(&self, installation: &Installation) -> Result<(), StoreError> {
        let key = installation.key().ok_or_else(no_key)?;
        self.put(
            key.item_key(&self.app, Place::Unscoped),
            installation,
            Place::Unscoped,
        );
        Ok(())
    }

    fn put(&self, item_key: String, installation: &Installation, place: Place) {
        self.shared.items.lock().expect("store lock").insert(
            item_key,
            Item {
                stored: Stored {
                    installation: installation.clone(),
                    broken: None,
                    revision: 0,
                    place,
                    tag: None,
                },
                refresh: None,
            },
        );
    }

    fn key(&self, key: &InstallationKey, place: Place) -> String {
        key.item_key(&self.app, place)
    }
}

fn no_key() -> StoreError {
    StoreError::Corrupt("an installation without a team or enterprise".into())
}

#[async_trait]
impl InstallationStore for MemoryInstallations {
    fn app(&self) -> &str {
        &self.app
    }

    async fn save(&self, installation: &Installation) -> Result<(), StoreError> {
        let key = installation.key().ok_or_else(no_key)?;
        self.put(self.key(&key, Place::Own), installation, Place::Own);
        Ok(())
    }

    async fn save_new(&self, installation: &Installation) -> Result<bool, StoreError> {
        let key = installation.key().ok_or_else(no_key)?;
        let item_key = self.key(&key, Place::Own);
        let mut items = self.shared.items.lock().expect("store lock");
        if items.contains_key(&item_key) {
            return Ok(false);
        }
        items.insert(
            item_key,
            Item {
                stored: Stored {
                    installation: installation.clone(),
                    broken: None,
                    revision: 0,
                    place: Place::Own,
                    tag: None,
                },
                refresh: None,
            },
        );
        Ok(true)
    }

    async fn find(&self, key: &InstallationKey) -> Result<Option<Stored>, StoreError> {
        let items = self.shared.items.lock().expect("store lock");
        Ok(items
            .get(&self.key(key, Place::Own))
            .or_else(|| items.get(&self.key(key, Place::Unscoped)))
            .map(|i| i.stored.clone()))
    }

    async fn delete(
        &self,
        key: &InstallationKey,
        place: Place,
        before_ms: u64,
        owns: Owns<'_>,
    ) -> Result<bool, StoreError> {
        let mut items = self.shared.items.lock().expect("store lock");
        let k = self.key(key, place);
        match items.get(&k) {
            Some(i) if i.stored.installation.installed_at_ms < before_ms && owns(&i.stored) => {
                items.remove(&k);
                Ok(true)
            }
            _ => Ok(false),
        }
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
        let mut items = self.shared.items.lock().expect("store lock");
        let k = self.key(key, place);
        let Some(item) = items.get_mut(&k) else {
            return Ok(false);
        };
        if !owns(&item.stored) {
            return Ok(false);
        }
        let i = &mut item.stored.installation;
        if i.installed_at_ms >= before_ms {
            return Ok(false);
        }
        if i.bot_user_id.as_ref().is_some_and(|b| bots.contains(b)) {
            items.remove(&k);
            return Ok(true);
        }
        if i.user.is_some() && i.user_id.as_ref().is_some_and(|u| users.contains(u)) {
            i.user = None;
            item.stored.revision += 1;
            return Ok(true);
        }
        Ok(false)
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
        let mut items = self.shared.items.lock().expect("store lock");
        let Some(item) = items.get_mut(&self.key(key, place)) else {
            return Ok(false);
        };
        if item.stored.installation.bot.rotation() != rotation || item.stored.broken.is_some() {
            return Ok(false);
        }
        match &item.refresh {
            Some((held_by, until)) if held_by != owner && *until > now_ms => Ok(false),
            _ => {
                item.refresh = Some((owner.to_string(), until_ms));
                Ok(true)
            }
        }
    }

    async fn release_refresh(
        &self,
        key: &InstallationKey,
        place: Place,
        owner: &str,
    ) -> Result<(), StoreError> {
        let mut items = self.shared.items.lock().expect("store lock");
        if let Some(item) = items.get_mut(&self.key(key, place))
            && item.refresh.as_ref().is_some_and(|(o, _)| o == owner)
        {
            item.refresh = None;
        }
        Ok(())
    }

    async fn store_refreshed(
        &self,
        key: &InstallationKey,
        place: Place,
        (replaced, revision): (&str, u64),
        owner: &str,
        refreshed: &Installation,
        _ready: &super::seal::ReadyKey,
    ) -> Result<bool, StoreError> {
        let mut items = self.shared.items.lock().expect("store lock");
        let Some(item) = items.get_mut(&self.key(key, place)) else {
            return Ok(false);
        };
        let current = item.stored.installation.bot.rotation();
        let holds = item.refresh.as_ref().is_some_and(|(o, _)| o == owner)
            && item.stored.revision == revision;
        let again = current == refreshed.bot.rotation();
        if !((current == replaced && holds) || again) {
            return Ok(false);
        }
        item.stored.installation = refreshed.clone();
        item.refresh = None;
        Ok(true)
    }

    async fn mark_broken(
        &self,
        key: &InstallationKey,
        place: Place,
        rotation: &str,
        code: &str,
    ) -> Result<bool, StoreError> {
        let mut items = self.shared.items.lock().expect("store lock");
        match items.get_mut(&self.key(key, place)) {
            Some(item)
                if item.stored.installation.bot.rotation() == rotation
                    && item.stored.broken.is_none() =>
            {
                item.stored.broken = Some(code.to_string());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn take_read(
        &self,
        key: &InstallationKey,
        method: &str,
        now_ms: u64,
        per_minute: u32,
    ) -> Result<Option<u64>, StoreError> {
        let mut reads = self.shared.reads.lock().expect("store lock");
        let next = reads.entry(key.pace_key(&self.app, method)).or_insert(0);
        if *next > now_ms {
            return Ok(Some(*next));
        }
        *next = now_ms + read_interval_ms(per_minute);
        Ok(None)
    }

    async fn tag_unscoped(&self, key: &InstallationKey, app_id: &str) -> Result<bool, StoreError> {
        let mut items = self.shared.items.lock().expect("store lock");
        match items.get_mut(&self.key(key, Place::Unscoped)) {
            Some(item)
                if item.stored.tag.is_none() && item.stored.installation.app_id.is_none() =>
            {
                item.stored.tag = Some(app_id.to_string());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn consume_state(
        &self,
        nonce: &str,
        spender: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut states = self.shared.states.lock().expect("store lock");
        match states.get(&state_key(&self.app, nonce)) {
            Some((_, Some(by))) => Ok(by == spender),
            _ => {
                states.insert(
                    state_key(&self.app, nonce),
                    (expires_at_ms, Some(spender.to_string())),
                );
                Ok(true)
            }
        }
    }
}
