//! The installation store in memory: local mode without `DEDUP_TABLE`, and tests.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{
    Installation, InstallationKey, InstallationStore, StoreError, Stored, read_interval_ms,
};

#[derive(Clone)]
struct Item {
    stored: Stored,
    refresh: Option<(String, u64)>,
}

/// The installation store in memory: this process only, lost when it ends.
#[derive(Default)]
pub struct MemoryInstallations {
    items: Mutex<HashMap<String, Item>>,
    /// state → (expires_at_ms, spent by).
    states: Mutex<HashMap<String, (u64, Option<String>)>>,
    /// pace key → next read free at (epoch ms).
    reads: Mutex<HashMap<String, u64>>,
}

impl MemoryInstallations {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every installation kept, for tests.
    pub fn all(&self) -> Vec<Stored> {
        let items = self.items.lock().expect("store lock");
        items.values().map(|i| i.stored.clone()).collect()
    }
}

#[async_trait]
impl InstallationStore for MemoryInstallations {
    async fn save(&self, installation: &Installation) -> Result<(), StoreError> {
        let key = installation.key().ok_or_else(|| {
            StoreError::Corrupt("an installation without a team or enterprise".into())
        })?;
        self.items.lock().expect("store lock").insert(
            key.item_key(),
            Item {
                stored: Stored {
                    installation: installation.clone(),
                    broken: None,
                    revision: 0,
                },
                refresh: None,
            },
        );
        Ok(())
    }

    async fn save_new(&self, installation: &Installation) -> Result<bool, StoreError> {
        let key = installation.key().ok_or_else(|| {
            StoreError::Corrupt("an installation without a team or enterprise".into())
        })?;
        if self
            .items
            .lock()
            .expect("store lock")
            .contains_key(&key.item_key())
        {
            return Ok(false);
        }
        self.save(installation).await?;
        Ok(true)
    }

    async fn find(&self, key: &InstallationKey) -> Result<Option<Stored>, StoreError> {
        let items = self.items.lock().expect("store lock");
        Ok(items.get(&key.item_key()).map(|i| i.stored.clone()))
    }

    async fn delete(&self, key: &InstallationKey, before_ms: u64) -> Result<bool, StoreError> {
        let mut items = self.items.lock().expect("store lock");
        let k = key.item_key();
        match items.get(&k) {
            Some(i) if i.stored.installation.installed_at_ms < before_ms => {
                items.remove(&k);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn revoke(
        &self,
        key: &InstallationKey,
        users: &[String],
        bots: &[String],
        before_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut items = self.items.lock().expect("store lock");
        let k = key.item_key();
        let Some(item) = items.get_mut(&k) else {
            return Ok(false);
        };
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
        rotation: &str,
        owner: &str,
        now_ms: u64,
        until_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut items = self.items.lock().expect("store lock");
        let Some(item) = items.get_mut(&key.item_key()) else {
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

    async fn release_refresh(&self, key: &InstallationKey, owner: &str) -> Result<(), StoreError> {
        let mut items = self.items.lock().expect("store lock");
        if let Some(item) = items.get_mut(&key.item_key())
            && item.refresh.as_ref().is_some_and(|(o, _)| o == owner)
        {
            item.refresh = None;
        }
        Ok(())
    }

    async fn store_refreshed(
        &self,
        key: &InstallationKey,
        (replaced, revision): (&str, u64),
        owner: &str,
        refreshed: &Installation,
    ) -> Result<bool, StoreError> {
        let mut items = self.items.lock().expect("store lock");
        let Some(item) = items.get_mut(&key.item_key()) else {
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
        rotation: &str,
        code: &str,
    ) -> Result<bool, StoreError> {
        let mut items = self.items.lock().expect("store lock");
        match items.get_mut(&key.item_key()) {
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
        let mut reads = self.reads.lock().expect("store lock");
        let next = reads.entry(key.pace_key(method)).or_insert(0);
        if *next > now_ms {
            return Ok(Some(*next));
        }
        *next = now_ms + read_interval_ms(per_minute);
        Ok(None)
    }

    async fn consume_state(
        &self,
        nonce: &str,
        spender: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut states = self.states.lock().expect("store lock");
        match states.get(nonce) {
            Some((_, Some(by))) => Ok(by == spender),
            _ => {
                states.insert(
                    nonce.to_string(),
                    (expires_at_ms, Some(spender.to_string())),
                );
                Ok(true)
            }
        }
    }
}
