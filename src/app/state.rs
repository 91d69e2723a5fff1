//! The app's own state, kept in the ledger's table beside the claims: small JSON values under
//! names the app chooses (a poll's votes, a counter, a user's settings), each with a version
//! and a TTL. [`State::update`] is the way to change one: it reads the value, applies the
//! change, and writes it only if nobody wrote in between (else it reads again and re-applies),
//! so two people voting at once are both counted. And it applies each change once per request:
//! the change is written in one transaction with its record on the request's own claim, so a
//! listener run again at any time the ledger remembers the request (Slack's retry after a
//! crash, a takeover, a queue redelivery an hour later, a redrive a day later) finds its change
//! made and does not make it again, whatever became of the value meanwhile.
//!
//! **Whose values.** [`Ctx::state`]'s names are the request's tenant's: in multi-workspace mode
//! the installation the request is answered with (a workspace's; for an org-wide install, the
//! enterprise's, one tenant for all its workspaces; for a Slack Connect channel, the
//! installation that received the request, never the other organization's). No name a listener
//! can write reaches another tenant's value: the tenant is part of the item's key, outside any
//! name. [`Ctx::shared_state`] is the one set of values every workspace shares (and, in
//! single-workspace mode, the same as [`Ctx::state`]: one workspace, values as before).

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use super::Ctx;
use crate::journal::Error;
use crate::ledger::{
    Held, LedgerError, MAX_STATE_BYTES, OwnerToken, RequestChange, StatePut, StateWrite,
};
use crate::slack::envelope::EventId;

/// How many times [`State::update`] reads again after another write came in between, before
/// it gives up with [`Error::Ledger`] (the listener fails, and Slack's retry tries again; a
/// click is not retried). Each conflict lets one contending writer through, so a burst of N
/// writers at once needs N attempts for the last: 64 serve a burst of 64 clicks on one value,
/// in about 3 s of waiting at most (the claim's deadline bounds it too).
pub(crate) const UPDATE_ATTEMPTS: u32 = 64;

/// A state value and its version (1 for the first write, one more each write since).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value, as written.
    pub value: T,
    /// Its version: 1 for the first write, one more each write since.
    pub version: u64,
}

/// What [`State::change`] came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed<T> {
    /// The value as it is now (`None`: none, or past its TTL).
    pub value: Option<T>,
    /// Whether the value holds this request's change: made by this run, or found made by an
    /// earlier run of the same request. `false`: the change left it as it was.
    pub applied: bool,
}

/// What [`State::put`] came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Put {
    /// Written, as this version.
    Written {
        /// The version written.
        version: u64,
    },
    /// Another write came after the version given: nothing was written. Read again.
    Conflict,
}

/// A state value as a write read it: its version (0: none), and its writers then.
#[derive(Clone, Copy)]
struct AsRead<'a> {
    version: u64,
    writers: &'a [String],
}

/// The app's state, from [`Ctx::state`].
///
/// ```
/// use std::time::Duration;
/// use slack_once::app::{BlockAction, Ctx, HandlerResult};
///
/// async fn vote(ctx: Ctx, click: BlockAction) -> HandlerResult {
///     let (Some(channel), Some(ts)) = (&click.channel_id, &click.message_ts) else {
///         return Ok(());
///     };
///     let poll = format!("poll-{channel}-{ts}"); // a message's ts is unique in its channel
///     let votes: Vec<String> = ctx
///         .state()
///         .update(&poll, Duration::from_secs(86_400), |votes: Option<Vec<String>>| {
///             let mut votes = votes.unwrap_or_default();
///             votes.push(click.user_id.clone());
///             votes
///         })
///         .await?;
///     tracing::info!(votes = votes.len(), "counted");
///     Ok(())
/// }
/// ```
#[derive(Clone, Debug)]
pub struct State {
    ctx: Ctx,
    /// The values every workspace shares ([`Ctx::shared_state`]), not the request's tenant's.
    shared: bool,
}

impl State {
    pub(crate) fn new(ctx: Ctx, shared: bool) -> Self {
        Self { ctx, shared }
    }

    /// The value under `name` and its version, unless none was written or it is past its TTL
    /// (or it is not a `T`: then `None` too, and a warning). A strongly consistent read.
    pub async fn get<T: DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<Versioned<T>>, Error> {
        let key = self.key(name)?;
        self.ctx.state_looked_at_again(&key);
        let item = self
            .ledger_call(|ledger, now| async move { ledger.state(&key, now).await })
            .await?;
        Ok(
            item.and_then(|item| match serde_json::from_str(&item.value) {
                Ok(value) => Some(Versioned {
                    value,
                    version: item.version,
                }),
                Err(error) => {
                    tracing::warn!(name, %error, "a state value of another shape: read as none");
                    None
                }
            }),
        )
    }

    /// Writes `value` under `name` if its version is still `version` (0: none there), for
    /// `ttl`. The low-level write: most listeners want [`State::update`], which re-applies a
    /// change when another write came in between. Like every state change it is made once per
    /// request: run again for the request, it finds its write made and writes nothing.
    pub async fn put<T: Serialize>(
        &self,
        name: &str,
        value: &T,
        version: u64,
        ttl: Duration,
    ) -> Result<Put, Error> {
        if let Ok(key) = self.key(name) {
            self.ctx.state_looked_at_again(&key);
        }
        let put = self.put_once(name, value, version, ttl).await;
        self.unknown_if_failed(&put).await;
        if let (Ok(Put::Conflict), Ok(key)) = (&put, self.key(name)) {
            // Nothing written: unless the listener reads the value again (or writes it), the
            // request's change is lost, which the end of the work names.
            self.ctx.state_conflict(&key, name);
        }
        put
    }

    /// A change whose ledger call failed is of unknown fate (its answer lost, the deadline
    /// passed): should the listener go on past the error, the request is not done, and its
    /// next run finds the change made or makes it.
    async fn unknown_if_failed<R>(&self, result: &Result<R, Error>) {
        if let Err(Error::Ledger(_)) = result {
            self.ctx.doubtful().await;
        }
    }

    async fn put_once<T: Serialize>(
        &self,
        name: &str,
        value: &T,
        version: u64,
        ttl: Duration,
    ) -> Result<Put, Error> {
        refuse_inside_remember(name)?;
        self.ctx.state_is_a_workers(true).await?;
        let claim = self.claim(name).await?;
        let key = self.key(name)?;
        let writers = match version {
            0 => Vec::new(),
            _ => {
                let key = key.clone();
                let item = self
                    .ledger_call(|ledger, now| async move { ledger.state(&key, now).await })
                    .await?;
                match item {
                    Some(item) if item.version == version => item.writers,
                    _ => Vec::new(),
                }
            }
        };
        let ids = self.ctx.next_state_change(&key, name);
        if version > 0
            && writers.contains(&ids.0)
            && self.made_without_claim_record(&key, &claim.0).await?
        {
            return Ok(Put::Written { version });
        }
        match self
            .write(
                name,
                value,
                AsRead {
                    version,
                    writers: &writers,
                },
                &ids,
                &claim,
                ttl,
            )
            .await?
        {
            StatePut::Written { version } | StatePut::MadeAlready { version } => {
                Ok(Put::Written { version })
            }
            StatePut::Conflict => Ok(Put::Conflict),
        }
    }

    /// Changes the value under `name` with `change` (given the value there, `None` if none),
    /// once for this request, and returns the value as it is after the change. Another write
    /// in between: read again and `change` applied again to what is there (so `change` may run
    /// more than once, and must only compute). Run again for the same request (a retry after
    /// a crash, a takeover, a redelivery), it finds its change made and returns the value as it
    /// is now without applying `change` again. The value lives `ttl` from its latest write.
    /// To know whether the value holds this request's change or another's (the first click
    /// wins), see [`State::change`].
    ///
    /// The listener's state changes must be the same, in the same order, each time it runs
    /// for a request (as its writes to Slack must be): each is told apart by its place.
    pub async fn update<T, F>(&self, name: &str, ttl: Duration, mut change: F) -> Result<T, Error>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> T,
    {
        let changed = self
            .change(name, ttl, |found: Option<T>| Some(change(found)))
            .await?;
        match changed.value {
            Some(value) => Ok(value),
            // Made by an earlier run, and its TTL ran out since: what the change makes of none.
            None => Ok(change(None)),
        }
    }

    /// As [`State::update`], where `change` may leave the value as it is (`None`: this request
    /// changes nothing), and says whether the value holds this request's change: made now, or
    /// found made by an earlier run of this request (a retry, a takeover, a redelivery), so
    /// that every run of the request takes the same path. The first click wins:
    ///
    /// ```
    /// use std::time::Duration;
    /// use slack_once::app::{BlockAction, Ctx, HandlerResult, Respond};
    ///
    /// async fn acknowledge(ctx: Ctx, click: BlockAction) -> HandlerResult {
    ///     let me = click.user_id.clone();
    ///     let day = Duration::from_secs(86_400);
    ///     let taken = ctx
    ///         .state()
    ///         .change("acknowledged", day, |by: Option<String>| match by {
    ///             Some(_) => None,          // someone was first: leave it
    ///             None => Some(me.clone()), // nobody yet: it is mine
    ///         })
    ///         .await?;
    ///     let text = match (taken.applied, taken.value) {
    ///         (true, _) => "You acknowledged it.".to_string(),
    ///         (false, Some(by)) => format!("<@{by}> acknowledged it first."),
    ///         (false, None) => "It is no longer open.".to_string(),
    ///     };
    ///     ctx.respond(Respond::ephemeral(text)).await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn change<T, F>(
        &self,
        name: &str,
        ttl: Duration,
        change: F,
    ) -> Result<Changed<T>, Error>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> Option<T>,
    {
        if let Ok(key) = self.key(name) {
            self.ctx.state_looked_at_again(&key);
        }
        let changed = self.change_once(name, ttl, change).await;
        self.unknown_if_failed(&changed).await;
        changed
    }

    async fn change_once<T, F>(
        &self,
        name: &str,
        ttl: Duration,
        change: F,
    ) -> Result<Changed<T>, Error>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> Option<T>,
    {
        refuse_inside_remember(name)?;
        self.ctx.state_is_a_workers(true).await?;
        let claim = self.claim(name).await?;
        let key = self.key(name)?;
        let ids = self.ctx.next_state_change(&key, name);
        let now = |item: Option<crate::ledger::StateItem>| -> Result<Option<T>, Error> {
            item.map(|item| parse(name, &item.value)).transpose()
        };
        let mut change = change;
        for attempt in 0..UPDATE_ATTEMPTS {
            if attempt > 0 {
                // Others are writing it too.
                tokio::time::sleep(self.wait_after_conflict(attempt)).await;
            }
            let (found, version, writers) = match self.read(&key).await? {
                Some(item)
                    if item.writers.contains(&ids.0)
                        && self.made_without_claim_record(&key, &claim.0).await? =>
                {
                    tracing::info!(
                        name,
                        "state change made already (among the value's writers, not in the claim's \
                         record)"
                    );
                    return Ok(Changed {
                        value: now(Some(item))?,
                        applied: true,
                    });
                }
                Some(item) => {
                    // A value of another shape is not taken for none (and overwritten).
                    let value: T = parse(name, &item.value)?;
                    (Some(value), item.version, item.writers)
                }
                None => (None, 0, Vec::new()),
            };
            let before = found
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| Error::Ledger(LedgerError::Unavailable(e.to_string().into())))?;
            let Some(value) = change(found) else {
                // This request changes nothing now; an earlier run of it may have (its writer
                // on the value, or its change recorded with the request's claim).
                let applied = writers.contains(&ids.0) || {
                    let held = claim.0.clone();
                    self.ledger_call(|ledger, _| async move { ledger.state_changes(&held).await })
                        .await?
                        .contains_key(&ids.1)
                };
                let value = before.map(|text| parse(name, &text)).transpose()?;
                return Ok(Changed { value, applied });
            };
            match self
                .write(
                    name,
                    &value,
                    AsRead {
                        version,
                        writers: &writers,
                    },
                    &ids,
                    &claim,
                    ttl,
                )
                .await?
            {
                StatePut::Written { .. } => {
                    return Ok(Changed {
                        value: Some(value),
                        applied: true,
                    });
                }
                StatePut::Conflict => continue,
                StatePut::MadeAlready { .. } => {
                    // Made by an earlier run for this request (or by this run's write, whose
                    // answer was lost): not again. The value as it is now (none if its TTL
                    // ran out since).
                    tracing::info!(name, "state change made already: not again");
                    return Ok(Changed {
                        value: now(self.read(&key).await?)?,
                        applied: true,
                    });
                }
            }
        }
        Err(Error::Ledger(LedgerError::Unavailable(
            format!(
                "the state value {name:?} kept changing: {UPDATE_ATTEMPTS} writes came in between"
            )
            .into(),
        )))
    }

    /// As [`State::change`], but made anew by every run of the request that calls it, on the
    /// value as that run reads it: not recorded with the request's claim (a later run does not
    /// find it made: it reads the value as it is then and decides again) and not counted among
    /// the request's changes (the changes after it keep their places). `applied`: this run
    /// wrote it. For what a run must hold by a write of its own, conditioned on the version it
    /// read (a step's completion about to be sent), never for a change the request makes once.
    pub(crate) async fn change_for_this_run<T, F>(
        &self,
        name: &str,
        ttl: Duration,
        change: F,
    ) -> Result<Changed<T>, Error>
    where
        T: Serialize + DeserializeOwned + Clone,
        F: FnMut(Option<T>) -> Option<T>,
    {
        if let Ok(key) = self.key(name) {
            self.ctx.state_looked_at_again(&key);
        }
        let changed = self.change_for_this_run_once(name, ttl, change).await;
        self.unknown_if_failed(&changed).await;
        changed
    }

    async fn change_for_this_run_once<T, F>(
        &self,
        name: &str,
        ttl: Duration,
        mut change: F,
    ) -> Result<Changed<T>, Error>
    where
        T: Serialize + DeserializeOwned + Clone,
        F: FnMut(Option<T>) -> Option<T>,
    {
        refuse_inside_remember(name)?;
        self.ctx.state_is_a_workers(true).await?;
        let (claim, _) = self.claim(name).await?;
        let key = self.key(name)?;
        // Never one of the writers a change of the request writes (`key#digest#n`), which a
        // release that decides by the writers alone looks for.
        let writer = format!("{claim}#this-run");
        for attempt in 0..UPDATE_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(self.wait_after_conflict(attempt)).await;
            }
            let (found, version, writers) = match self.read(&key).await? {
                Some(item) => (
                    Some(parse::<T>(name, &item.value)?),
                    item.version,
                    item.writers,
                ),
                None => (None, 0, Vec::new()),
            };
            let Some(value) = change(found.clone()) else {
                return Ok(Changed {
                    value: found,
                    applied: false,
                });
            };
            let text = self.text_of(name, &value)?;
            let expires_at_s = (crate::clock::now_ms() / 1000).saturating_add(ttl.as_secs().max(1));
            let written = self
                .ledger_call(|ledger, now| {
                    let (key, text, writer, writers) =
                        (key.clone(), text.clone(), writer.clone(), writers.clone());
                    async move {
                        let write = StateWrite {
                            value: &text,
                            expected: version,
                            writer: &writer,
                            read_writers: &writers,
                            expires_at_s,
                            request: None,
                        };
                        ledger.put_state(&key, &write, now).await
                    }
                })
                .await?;
            match written {
                StatePut::Written { .. } => {
                    return Ok(Changed {
                        value: Some(value),
                        applied: true,
                    });
                }
                // No request's record: only another write coming in between refuses it.
                StatePut::Conflict | StatePut::MadeAlready { .. } => continue,
            }
        }
        Err(Error::Ledger(LedgerError::Unavailable(
            format!(
                "the state value {name:?} kept changing: {UPDATE_ATTEMPTS} writes came in between"
            )
            .into(),
        )))
    }

    /// How long to wait before the `attempt`th read after a conflict: growing to 50 ms, half
    /// of it random, so that a burst settles and writers who met do not meet again.
    fn wait_after_conflict(&self, attempt: u32) -> Duration {
        let base = (5 * u64::from(attempt)).min(50);
        let wait = Duration::from_millis(base / 2 + jitter_ms(base / 2));
        wait.min(self.ctx.remaining() / 4)
    }

    async fn read(&self, key: &EventId) -> Result<Option<crate::ledger::StateItem>, Error> {
        let key = key.clone();
        self.ledger_call(|ledger, now| async move { ledger.state(&key, now).await })
            .await
    }

    /// Whether this request's change of the value under `key` was made without a record in the
    /// claim, by a release that decides by the value's writers alone (one before changes were
    /// recorded with the claim, which may still serve during a rolling deploy): the value keeps
    /// the writer that release writes for it (this release writes it too, for that release to
    /// find), and the request's claim records no change to that value (so no listener of this
    /// release wrote that writer). A read of the claim, only where the writer was found: a
    /// request run again.
    async fn made_without_claim_record(
        &self,
        key: &EventId,
        claim: &EventId,
    ) -> Result<bool, Error> {
        let claim = claim.clone();
        let recorded = self
            .ledger_call(|ledger, _| async move { ledger.state_changes(&claim).await })
            .await?;
        let value = format!(":{}#", crate::ledger::state_key_digest(key));
        Ok(!recorded.keys().any(|id| id.contains(&value)))
    }

    /// The request's claim a change of `name` is recorded with: refused where there is none.
    async fn claim(&self, name: &str) -> Result<(EventId, OwnerToken), Error> {
        self.ctx.claim().await.ok_or_else(|| Error::Unclaimed {
            what: format!("state change {name:?}"),
        })
    }

    /// Writes `value` under `name` over the version `read`, the change recorded with the
    /// request's claim in the same write.
    async fn write<T: Serialize>(
        &self,
        name: &str,
        value: &T,
        read: AsRead<'_>,
        (writer, change): &(String, String),
        (key_of_claim, owner): &(EventId, OwnerToken),
        ttl: Duration,
    ) -> Result<StatePut, Error> {
        let AsRead {
            version: expected,
            writers: read_writers,
        } = read;
        let key = self.key(name)?;
        let text = self.text_of(name, value)?;
        let expires_at_s = (crate::clock::now_ms() / 1000).saturating_add(ttl.as_secs().max(1));
        let written = self
            .ledger_call(|ledger, now| {
                let (key, text) = (key.clone(), text.clone());
                async move {
                    let write = StateWrite {
                        value: &text,
                        expected,
                        writer,
                        read_writers,
                        expires_at_s,
                        request: Some(RequestChange {
                            held: Held {
                                event_id: key_of_claim,
                                owner,
                            },
                            change,
                        }),
                    };
                    ledger.put_state(&key, &write, now).await
                }
            })
            .await;
        if let Err(Error::Ledger(_)) = &written {
            // Its fate unknown (the answer lost, the deadline passed): should the listener go
            // on past the error, the request is not done, and its next run finds the change
            // made or makes it.
            self.ctx.doubtful().await;
        }
        written
    }

    /// `value` as the ledger keeps it (JSON), refused where it is larger than it keeps.
    fn text_of<T: Serialize>(&self, name: &str, value: &T) -> Result<String, Error> {
        let text = serde_json::to_string(value).map_err(|e| {
            Error::Ledger(LedgerError::Unavailable(
                format!("the state value {name:?} does not serialise: {e}").into(),
            ))
        })?;
        if text.len() > MAX_STATE_BYTES {
            return Err(Error::Ledger(LedgerError::ItemTooLarge(
                format!(
                    "the state value {name:?} is {} bytes; at most {MAX_STATE_BYTES}",
                    text.len()
                )
                .into(),
            )));
        }
        Ok(text)
    }

    /// The ledger key of `name`: see [`state_key`]; the request's tenant's unless shared.
    fn key(&self, name: &str) -> Result<EventId, Error> {
        let tenant = match self.shared {
            true => None,
            false => self.ctx.installation(),
        };
        state_key(self.ctx.app_id(), tenant, name)
            .map_err(|e| Error::Ledger(LedgerError::Unavailable(e.into())))
    }

    async fn ledger_call<'a, R, F, Fut>(&'a self, call: F) -> Result<R, Error>
    where
        F: FnOnce(std::sync::Arc<dyn crate::ledger::Ledger>, u64) -> Fut,
        Fut: std::future::Future<Output = Result<R, LedgerError>> + 'a,
    {
        self.ctx.state_is_a_workers(false).await?;
        let ledger = self.ctx.ledger().await;
        let now = crate::clock::now_ms();
        tokio::time::timeout_at(self.ctx.deadline(), call(ledger, now))
            .await
            .map_err(|_| {
                Error::Ledger(LedgerError::Unavailable(
                    "the ledger did not answer before the deadline".into(),
                ))
            })?
            .map_err(Error::Ledger)
    }
}

/// State changes are refused inside [`Ctx::remember`]: a run that finds its result
/// remembered would not make them, and the request's changes would differ between runs.
fn refuse_inside_remember(name: &str) -> Result<(), Error> {
    match crate::journal::inside_remember() {
        Some(step) => Err(Error::InsideRemember {
            step,
            method: format!("state change {name:?}"),
        }),
        None => Ok(()),
    }
}

/// The ledger key of the state value `name` of the app `app` (`noapp` where none is known):
/// `tenant`'s (`statew-APP-TENANT-…`), or (`None`: a shared or single-workspace value)
/// `state-APP-…`, as releases before tenants wrote them; a readable prefix of the name and a
/// digest of the tenant and the name (names are any text). The two prefixes differ in their
/// sixth character, so no shared key is ever a tenant's, and the tenant is a field of its own,
/// never read from the name: no name reaches another tenant's value.
pub(crate) fn state_key(
    app: Option<&str>,
    tenant: Option<&str>,
    name: &str,
) -> Result<EventId, String> {
    let app = alphanumeric(app.unwrap_or("noapp"), 24);
    let readable: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(40)
        .collect();
    let key = match tenant.map(|t| alphanumeric(t, 24)) {
        None => {
            let digest = hex::encode(&Sha256::digest(name.as_bytes())[..12]);
            format!("state-{app}-{readable}-{digest}")
        }
        Some(tenant) => {
            let digest = Sha256::new()
                .chain_update(b"tenant state\0")
                .chain_update(tenant.as_bytes())
                .chain_update([0])
                .chain_update(name.as_bytes())
                .finalize();
            format!(
                "statew-{app}-{tenant}-{readable}-{}",
                hex::encode(&digest[..12])
            )
        }
    };
    EventId::try_from(key).map_err(|e| e.to_string())
}

/// The ASCII letters and digits of `text`, at most `max` of them.
fn alphanumeric(text: &str, max: usize) -> String {
    text.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(max)
        .collect()
}

/// Up to `max` milliseconds, at random.
fn jitter_ms(max: u64) -> u64 {
    u64::from(u16::from_le_bytes(
        uuid::Uuid::new_v4().as_bytes()[..2]
            .try_into()
            .expect("2 bytes"),
    )) % (max + 1)
}

fn parse<T: DeserializeOwned>(name: &str, text: &str) -> Result<T, Error> {
    serde_json::from_str(text).map_err(|e| {
        Error::Ledger(LedgerError::Unavailable(
            format!("the state value {name:?} is of another shape: {e}").into(),
        ))
    })
}
