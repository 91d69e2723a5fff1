//! `slack-once redrive`: moves what waits in deferred mode's dead-letter queue back to the work
//! queue, once its cause is fixed (Slack was down, the bot was not in the channel, a bug in a
//! listener). The ledger still decides every Slack write: a redriven request is claimed like
//! any other delivery, its journal replayed, so nothing it wrote before is written again.
//!
//! For each message, its ledger items (the message's identity and its `event_id`, or the
//! command's or interaction's key) say what to do:
//! - `done`: answered already; moved all the same (the worker finds it done and drops it: a
//!   request may have items `redrive` does not see, a listener's of its own, another app's);
//! - `failed`, retryable (the queue's receives ran out on a transient failure): moved, its TTL
//!   extended so that the redriven copy is judged by its journal;
//! - `failed` for good with a cause an operator can fix (`not_in_channel`, `channel_not_found`,
//!   `missing_scope`, `invalid_auth`, `token_revoked`, `account_inactive`, a listener's error):
//!   made retryable, then moved;
//! - `failed` because a write's fate could not be known (`unconfirmed_write`), or for a cause no
//!   redrive changes (a listener whose writes change between runs, a journal full, an
//!   acknowledgement too late): refused, left where it is;
//! - a live claim: left (try again after its lease);
//! - no item, or a claim given up: moved.
//!
//! Items of another app sharing the table are not this request's, and are passed over. An
//! item of a later format than this release reads is refused (its worker could not take it).
//!
//! Refused as well, and left: what Slack no longer honours (a command's or an interaction's
//! `response_url` 30 minutes after the request, with 5 minutes' margin; a view its listener may have opened with a
//! `trigger_id`, which expires after 3 seconds), what the ledger may have forgotten (a request
//! older than `DEDUP_TTL_SECONDS` less an hour: its journal may be gone, and a redrive could
//! answer it twice), and messages this release does not read. A claim such a request left in
//! progress past its lease (a worker killed on its last receive, or marked for a redelivery
//! that never took it) ends `failed` (`dead_letter_refused`, retryable as a lapsed claim is),
//! so that the ledger says why it was never answered.

mod dynamo;
mod postgres;

use std::collections::HashSet;
use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use async_trait::async_trait;

use super::args::{self, Args, Spec, env};
use crate::queue::sqs::{self, CallBudget};
use crate::queue::{QUEUED_FORM_VERSION_UNKNOWN, QueuedEvent, READS};

use crate::slack::envelope::{Envelope, EventId};
use crate::slack::interaction::Interaction;
pub use dynamo::Queues;
pub use postgres::PostgresDeadLetters;

/// How long after the request a redriven command or interaction may still be answered through
/// its `response_url`: Slack takes posts for 30 minutes, less 5 for the worker to get to it.
pub const REDRIVE_RESPONSE_URL_WITHIN: Duration = Duration::from_secs(25 * 60);

/// The failure code of a claim `redrive` ends because it refused the request's dead letter:
/// nothing brings the request back (retryable all the same, as a lapsed claim is).
pub const DEAD_LETTER_REFUSED: &str = "dead_letter_refused";

/// How much of the ledger's TTL a redriven request must have left: its claim, its lease and a
/// margin, so that its journal is still there while it runs.
pub const TTL_MARGIN: Duration = Duration::from_secs(3600);

/// Failure codes no redrive changes: the request is left where it is, and said why.
pub const NEVER_REDRIVEN: &[(&str, &str)] = &[
    (
        "unconfirmed_write",
        "a write of it may or may not be in Slack and cannot be looked for: never made again",
    ),
    (
        "nondeterministic_listener",
        "its listener's writes changed between runs: fix the listener; a redrive would fail again",
    ),
    (
        "journal_full",
        "its listener makes more writes than a request's journal holds",
    ),
    (
        "ack_too_late",
        "its acknowledgement could not reach Slack in time, and cannot now",
    ),
    ("invalid_payload", "it is not a request slack-once reads"),
];

/// What `redrive` does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Report only: nothing moved, removed or reset.
    pub dry_run: bool,
    /// At most this many messages are looked at.
    pub max: usize,
    /// The ledger's TTL (`DEDUP_TTL_SECONDS`).
    pub ttl: Duration,
    /// Now, in epoch milliseconds.
    pub now_ms: u64,
    /// How long a message received is hidden from the next receive (SQS's visibility
    /// timeout): one seen again within a run has come back after it ([`RECEIVE_VISIBILITY`]).
    pub visibility: Duration,
}

/// How long `redrive` hides each message it receives while it looks at the queue.
pub const RECEIVE_VISIBILITY: Duration = Duration::from_secs(300);

/// What became of one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Moved back to the work queue (with `--dry-run`: would be).
    Moved,
    /// Its items say answered: moved all the same, for the worker to find it done and drop
    /// it (with `--dry-run`: would be).
    Answered,
    /// A live claim holds it: left, to redrive after its lease.
    Held,
    /// Left in the dead-letter queue, for this reason.
    Refused(String),
}

/// One message of the dead-letter queue, as `redrive` found it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The SQS message id.
    pub message_id: String,
    /// What the request is: the event's type, `command`, `block_actions`…
    pub kind: String,
    /// Its ledger keys, each with its item's status (`absent` for none).
    pub items: Vec<(String, String)>,
    /// Why it failed, as the ledger recorded it (`error`), if it did.
    pub failure: Option<String>,
    /// What was done.
    pub action: Action,
}

/// What `redrive` found and did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every message looked at, in the order received.
    pub entries: Vec<Entry>,
    /// Nothing was changed (`--dry-run`).
    pub dry_run: bool,
    /// The run stopped at a message it had seen already (visible again after a long run).
    pub came_back: bool,
    /// Why the run stopped before the queue was empty, if an error stopped it: what is listed
    /// was done.
    pub error: Option<RedriveError>,
}

impl Report {
    /// How many entries came to `action`'s kind.
    pub fn count(&self, matches: impl Fn(&Action) -> bool) -> usize {
        self.entries.iter().filter(|e| matches(&e.action)).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let moved = match self.dry_run {
            true => "would move",
            false => "moved",
        };
        for e in &self.entries {
            let (what, why) = match &e.action {
                Action::Moved => (moved, String::new()),
                Action::Answered => (
                    moved,
                    "answered already: the worker finds it done and drops it".to_string(),
                ),
                Action::Held => (
                    "left",
                    "a live claim holds it: redrive after its lease".into(),
                ),
                Action::Refused(why) => ("refused", why.clone()),
            };
            let items: Vec<String> = e.items.iter().map(|(k, s)| format!("{k}={s}")).collect();
            write!(
                f,
                "{what:<12} {} {} [{}]",
                e.message_id,
                e.kind,
                items.join(" ")
            )?;
            if let Some(failure) = &e.failure {
                write!(f, " failed: {failure}")?;
            }
            if !why.is_empty() {
                write!(f, " — {why}")?;
            }
            writeln!(f)?;
        }
        write!(
            f,
            "{} {moved} ({} of them answered already), {} left (held), {} refused{}",
            self.count(|a| matches!(a, Action::Moved | Action::Answered)),
            self.count(|a| *a == Action::Answered),
            self.count(|a| *a == Action::Held),
            self.count(|a| matches!(a, Action::Refused(_))),
            if self.dry_run {
                "; a dry run: nothing changed"
            } else {
                ""
            }
        )?;
        if self.came_back {
            write!(
                f,
                "\nstopped: a message came back (a long run): run it again for the rest"
            )?;
        }
        if let Some(error) = &self.error {
            write!(f, "\nstopped by an error: {error}")?;
        }
        Ok(())
    }
}

/// Why `redrive` stopped.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RedriveError {
    /// The queue (SQS, or PostgreSQL's) did not answer, or refused.
    #[error("the queue: {0}")]
    Queue(String),
    /// The ledger (DynamoDB, or PostgreSQL) did not answer, or refused.
    #[error("the ledger: {0}")]
    Ledger(String),
}

/// A request's claim as `redrive` judges it, whichever ledger holds it.
#[derive(Clone, Debug, Default)]
pub struct ClaimView {
    /// `in_progress`, `done`, `released` or `failed`.
    pub status: String,
    /// Why it failed, as recorded.
    pub error: Option<String>,
    /// The format it was written in, where the ledger versions its items.
    pub format: Option<u64>,
    /// When its lease ends (epoch ms, on the caller's clock).
    pub lease_until_ms: Option<u64>,
    /// The Slack app whose claim it is.
    pub app: Option<String>,
    /// Its owner token, which a change made of it is conditioned on.
    pub owner: Option<String>,
    /// When it expires (epoch seconds).
    pub expires_at_s: Option<u64>,
}

/// The ledger's side of `redrive`: read a request's claims, make a failed one claimable, end a
/// lapsed one refused.
#[async_trait]
pub trait RedriveLedger: Send + Sync {
    /// The claim at `key`, unless absent or past its TTL at `now_ms`.
    async fn read(&self, key: &EventId, now_ms: u64) -> Result<Option<ClaimView>, RedriveError>;

    /// Makes the failed claim at `key` claimable by a redriven copy (retryable), expiring no
    /// sooner than `expires_at_s`, conditioned on it being as read (`view`): a claim in between
    /// wins.
    async fn make_claimable(
        &self,
        key: &EventId,
        view: &ClaimView,
        expires_at_s: u64,
    ) -> Result<(), RedriveError>;

    /// Ends `failed` ([`DEAD_LETTER_REFUSED`], retryable) the claim at `key` left in progress
    /// past its lease, conditioned on its owner and lease as read; whether it did.
    async fn end_refused(
        &self,
        key: &EventId,
        view: &ClaimView,
        now_ms: u64,
    ) -> Result<bool, RedriveError>;
}

/// A message of the dead letters, as received.
#[derive(Clone, Debug)]
pub struct DeadLetter {
    /// Its id (SQS's `MessageId`, or the queue's row id).
    pub id: String,
    /// What moves or leaves it (valid for this receive).
    pub receipt: String,
    /// The queued request, as sent.
    pub body: String,
}

/// The queue's side of `redrive`: the dead letters, received, moved back or left.
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// Up to `max` dead letters, each hidden for `visibility` from the next receive; none when
    /// there are no more.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<DeadLetter>, RedriveError>;

    /// Moves `letter` back to the work queue: sent there, then removed from the dead letters
    /// (a crash between leaves a copy, which the ledger answers once).
    async fn move_back(&self, letter: &DeadLetter) -> Result<(), RedriveError>;

    /// Makes the dead letters of `receipts` visible again at once: for the next look, or the
    /// real run after a dry one.
    async fn leave(&self, receipts: Vec<String>);
}

/// Looks at up to `options.max` messages of the dead-letter queue and moves or leaves each as
/// the module's documentation says. An SQS or DynamoDB error stops it: the report says what
/// was done before, and the error ([`Report::error`]).
pub async fn redrive(q: &Queues<'_>, options: &Options) -> Report {
    redrive_with(q, q, options).await
}

/// [`redrive`] on any queue and ledger.
pub async fn redrive_with(
    letters: &dyn DeadLetters,
    ledger: &dyn RedriveLedger,
    options: &Options,
) -> Report {
    let mut report = Report {
        dry_run: options.dry_run,
        ..Report::default()
    };
    let mut held_back = Vec::new();
    if let Err(error) = receive_all(letters, ledger, options, &mut report, &mut held_back).await {
        report.error = Some(error);
    }
    letters.leave(held_back).await;
    report
}

async fn receive_all(
    letters: &dyn DeadLetters,
    ledger: &dyn RedriveLedger,
    options: &Options,
    report: &mut Report,
    held_back: &mut Vec<String>,
) -> Result<(), RedriveError> {
    let mut seen = HashSet::new();
    'receiving: while report.entries.len() < options.max {
        let want = (options.max - report.entries.len()).min(10);
        let messages = letters.receive(want, options.visibility).await?;
        if messages.is_empty() {
            break;
        }
        // What of this batch was not looked at, should the run stop on an error mid-way: made
        // visible again at the end, as what was held back is.
        let mut rest: Vec<String> = messages.iter().map(|m| m.receipt.clone()).collect();
        rest.reverse();
        for (i, letter) in messages.iter().enumerate() {
            rest.pop();
            if !seen.insert(letter.id.clone()) {
                // A message seen already: this run has gone round. It, and the rest of its
                // batch (received, not looked at), are visible again at once, not in 5 minutes.
                report.came_back = true;
                held_back.extend(messages[i..].iter().map(|m| m.receipt.clone()));
                break 'receiving;
            }
            let entry = match judge(ledger, options, &letter.id, &letter.body).await {
                Ok(entry) => entry,
                Err(e) => {
                    held_back.push(letter.receipt.clone());
                    held_back.extend(rest);
                    return Err(e);
                }
            };
            let moving = matches!(
                (&entry.action, options.dry_run),
                (Action::Moved | Action::Answered, false)
            );
            if !moving {
                held_back.push(letter.receipt.clone());
            } else if let Err(e) = letters.move_back(letter).await {
                held_back.push(letter.receipt.clone());
                held_back.extend(rest);
                return Err(e);
            }
            report.entries.push(entry);
        }
    }
    Ok(())
}

/// The request a dead letter holds: its kind, its ledger keys, when it arrived, and why it
/// cannot be redriven whatever its items say.
struct Request {
    kind: String,
    keys: Vec<EventId>,
    /// The app it is for (`api_app_id`): an item of another app is not its own.
    app: Option<String>,
    refused: Option<String>,
    /// Past the ledger's memory, or nearly: its items may expire before a worker reads them.
    forgotten: bool,
}

fn request_of(body: &str, options: &Options) -> Request {
    let unread = |why: String| Request {
        kind: "?".into(),
        keys: Vec::new(),
        app: None,
        refused: Some(why),
        forgotten: false,
    };
    let queued: QueuedEvent = match serde_json::from_str(body) {
        Ok(q) => q,
        Err(e) => return unread(format!("not a queued request: {e}")),
    };
    if !READS.contains(&queued.v) {
        return unread(format!(
            "format {} is not one this release reads: redrive it with the release that wrote it",
            queued.v
        ));
    }
    let age = Duration::from_millis(options.now_ms.saturating_sub(queued.received_at_ms));
    let forgotten = age + TTL_MARGIN > options.ttl;
    let mut request = if let Some(envelope) = &queued.envelope {
        match serde_json::from_str::<Envelope>(envelope.get()) {
            Ok(Envelope::EventCallback(callback)) => {
                let (by_message, alias) = crate::keys::ledger_keys(&callback, true);
                let (by_event, _) = crate::keys::ledger_keys(&callback, false);
                // The alias (`cmid-…`) only points at the message's item.
                let _ = alias;
                let mut keys = vec![by_message];
                if !keys.contains(&by_event) {
                    keys.push(by_event);
                }
                Request {
                    kind: callback.event.kind.clone(),
                    keys,
                    app: callback.api_app_id.clone(),
                    refused: None,
                    forgotten: false,
                }
            }
            Ok(_) => unread("an envelope that is not an event".into()),
            Err(e) => unread(format!("an envelope that does not parse: {e}")),
        }
    } else if let Some(form) = &queued.form {
        match Interaction::from_form(form.as_bytes()) {
            Ok(interaction) => {
                let refused = if queued.v == QUEUED_FORM_VERSION_UNKNOWN {
                    Some(
                        "a view its listener may have opened needs the request's trigger_id, \
                         which expired 3 s after the request"
                            .to_string(),
                    )
                } else if age > REDRIVE_RESPONSE_URL_WITHIN {
                    Some(format!(
                        "its response_url expired, or will before a worker answers: Slack takes \
                         posts for 30 minutes after the request ({} min ago)",
                        age.as_secs() / 60
                    ))
                } else {
                    None
                };
                Request {
                    kind: interaction.kind.as_str().to_string(),
                    keys: interaction.key().into_iter().collect(),
                    app: interaction.api_app_id.clone(),
                    refused,
                    forgotten: false,
                }
            }
            Err(e) => unread(format!("a form that does not parse: {e}")),
        }
    } else {
        unread("neither an envelope nor a form".into())
    };
    request.forgotten = forgotten;
    if request.refused.is_none() && forgotten {
        request.refused = Some(format!(
            "{} h old, past the ledger's memory (DEDUP_TTL_SECONDS less an hour): its journal \
             may be gone, and a redrive could answer it twice",
            age.as_secs() / 3600
        ));
    }
    request
}

/// What to do with one message, its failed items made claimable (unless `--dry-run`) where it
/// is to be moved.
async fn judge(
    ledger: &dyn RedriveLedger,
    options: &Options,
    message_id: &str,
    body: &str,
) -> Result<Entry, RedriveError> {
    let request = request_of(body, options);
    let mut entry = Entry {
        message_id: message_id.to_string(),
        kind: request.kind.clone(),
        items: Vec::new(),
        failure: None,
        action: Action::Moved,
    };
    let items = read_items(ledger, options, &request, &mut entry).await?;
    let status = |i: &ClaimView| i.status.clone();
    // Answered: moved whatever else holds (the worker finds it done and drops it), so that a
    // done request never waits in the dead-letter queue for a refusal.
    // Not when its items may expire before the worker reads them: the worker would find them
    // absent and answer again. Such a request stays in the dead-letter queue, refused.
    if !items.is_empty() && items.iter().all(|(_, i)| status(i) == "done") {
        entry.action = match (request.forgotten, request.refused) {
            (true, Some(why)) => Action::Refused(format!("answered already; {why}")),
            _ => Action::Answered,
        };
        return Ok(entry);
    }
    if let Some(fmt) = items
        .iter()
        .filter_map(|(_, i)| i.format)
        .find(|f| *f > crate::ledger::dynamo::ITEM_FORMAT_READ)
    {
        entry.action = Action::Refused(format!(
            "its item is of format {fmt}, which this release does not take over: redrive it \
             with the release that wrote it"
        ));
        return Ok(entry);
    }
    entry.failure = items.iter().find_map(|(_, i)| i.error.clone());
    if let Some(why) = request.refused {
        entry.action = Action::Refused(end_lapsed_claims(ledger, options, &items, why).await?);
        return Ok(entry);
    }
    if let Some((code, why)) = items
        .iter()
        .map(|(_, i)| i)
        .filter(|i| status(i) == "failed")
        .filter_map(|i| i.error.as_deref())
        .find_map(|code| NEVER_REDRIVEN.iter().find(|(c, _)| *c == code))
    {
        entry.action = Action::Refused(format!("{code}: {why}"));
        return Ok(entry);
    }
    if items.iter().any(|(_, i)| {
        status(i) == "in_progress" && i.lease_until_ms.is_some_and(|until| until > options.now_ms)
    }) {
        entry.action = Action::Held;
        return Ok(entry);
    }
    if !options.dry_run {
        for (key, item) in items.iter().filter(|(_, i)| status(i) == "failed") {
            let expires_s = item
                .expires_at_s
                .unwrap_or(0)
                .max((options.now_ms + TTL_MARGIN.as_millis() as u64) / 1000);
            ledger.make_claimable(key, item, expires_s).await?;
        }
    }
    Ok(entry)
}

/// The items of `request`'s keys (each listed in `entry` with its status, `absent` when there
/// is none): where another app's item stands under a key, this app's own under the key scoped
/// to it.
async fn read_items(
    ledger: &dyn RedriveLedger,
    options: &Options,
    request: &Request,
    entry: &mut Entry,
) -> Result<Vec<(EventId, ClaimView)>, RedriveError> {
    let mut items: Vec<(EventId, ClaimView)> = Vec::new();
    for key in &request.keys {
        let mut key = key.clone();
        let mut item = ledger.read(&key, options.now_ms).await?;
        // Another app's item in a shared table is not this request's: its own claim, if any,
        // is under its app's key (as the pipeline claims it), which decides instead.
        if let (Some(theirs), Some(ours)) = (
            item.as_ref().and_then(|i| i.app.as_deref()),
            request.app.as_deref(),
        ) && theirs != ours
        {
            match crate::ledger::app_scoped(&key, ours) {
                Some(scoped) => {
                    key = scoped;
                    item = ledger.read(&key, options.now_ms).await?;
                }
                None => item = None,
            }
        }
        let status = item
            .as_ref()
            .map(|i| i.status.clone())
            .unwrap_or_else(|| "absent".to_string());
        entry.items.push((key.to_string(), status));
        if let Some(item) = item {
            items.push((key.clone(), item));
        }
    }
    Ok(items)
}

/// A refused request (`why`): nothing brings it back now, so a claim of it left in progress
/// past its lease (a worker's last receive killed, or one marked for a redelivery that never
/// took it) ends failed with the reason, retryable as a lapsed claim is, so that the ledger
/// says why it was never answered. The refusal, with what became of such claims.
async fn end_lapsed_claims(
    ledger: &dyn RedriveLedger,
    options: &Options,
    items: &[(EventId, ClaimView)],
    why: String,
) -> Result<String, RedriveError> {
    let mut ended = 0;
    for (key, item) in items.iter().filter(|(_, i)| {
        i.status == "in_progress"
            && i.lease_until_ms
                .is_some_and(|until| until <= options.now_ms)
    }) {
        if options.dry_run || ledger.end_refused(key, item, options.now_ms).await? {
            ended += 1;
        }
    }
    Ok(match ended {
        0 => why,
        _ => format!(
            "{why}; its claim left in progress {} failed ({DEAD_LETTER_REFUSED})",
            if options.dry_run {
                "would end"
            } else {
                "ended"
            }
        ),
    })
}

/// `redrive [--dry-run] [--max N]`.
pub static SPEC: Spec = Spec {
    name: "redrive",
    about: "move deferred mode's dead letters (DEAD_LETTER_QUEUE_URL, else\n\
            WORK_QUEUE_URL-dlq) back to WORK_QUEUE_URL, their failed items in\n\
            DEDUP_TABLE made claimable; what Slack or the ledger no longer honours\n\
            is refused and left; prints what it did and why each had failed",
    operands: &[],
    options: &[
        args::Item {
            name: "--dry-run",
            help: "say what would be done, change nothing",
        },
        args::Item {
            name: "--max N",
            help: "look at N messages at most (default 1000)",
        },
    ],
    env: &[
        args::Item {
            name: "WORK_QUEUE_URL",
            help: "the work queue (the stack's output WorkQueueUrl)",
        },
        args::Item {
            name: "DATABASE_URL",
            help: "on PostgreSQL: the database of the queue and the ledger",
        },
        args::Item {
            name: "WORK_QUEUE_NAME",
            help: "on PostgreSQL: the queue whose dead letters to move back",
        },
        args::Item {
            name: "DEAD_LETTER_QUEUE_URL",
            help: "its dead-letter queue (default: WORK_QUEUE_URL-dlq)",
        },
        args::Item {
            name: "DEDUP_TABLE",
            help: "the ledger's table (the stack's output LedgerTableName)",
        },
        args::Item {
            name: "DEDUP_TTL_SECONDS",
            help: "how long the ledger remembers a request, as the functions have it",
        },
    ],
};

/// Runs `redrive` with its arguments.
pub fn run(args: &Args) -> ExitCode {
    let max = match args.parsed::<usize>("--max", "a number of messages (1 or more)") {
        Ok(Some(0)) => return args.fail("--max takes a number of messages (1 or more)"),
        Ok(max) => max.unwrap_or(1000),
        Err(code) => return code,
    };
    let ttl = match env("DEDUP_TTL_SECONDS").map(|v| v.parse::<u64>()) {
        None => crate::config::MIN_TTL,
        Some(Ok(s)) => Duration::from_secs(s),
        Some(Err(_)) => return args.fail("DEDUP_TTL_SECONDS is a number of seconds"),
    };
    let options = Options {
        dry_run: args.flag("--dry-run"),
        max,
        ttl,
        now_ms: crate::clock::now_ms(),
        visibility: RECEIVE_VISIBILITY,
    };
    let report = match (env("DATABASE_URL"), env("WORK_QUEUE_NAME")) {
        (Some(url), Some(name)) => match redrive_postgres(&url, &name, &options) {
            Ok(report) => report,
            Err(error) => return args.fail(&error),
        },
        (None, None) => match redrive_aws(args, &options) {
            Ok(report) => report,
            Err(code) => return code,
        },
        _ => {
            return args.fail(
                "on PostgreSQL, set both DATABASE_URL and WORK_QUEUE_NAME (the queue whose \
                 dead letters to move back)",
            );
        }
    };
    say!("{report}");
    match &report.error {
        None => ExitCode::SUCCESS,
        Some(error) => args.failed(&error.to_string()),
    }
}

/// `redrive` on SQS and DynamoDB, as the environment names them.
fn redrive_aws(args: &Args, options: &Options) -> Result<Report, ExitCode> {
    let (Some(work), Some(table)) = (env("WORK_QUEUE_URL"), env("DEDUP_TABLE")) else {
        return Err(args.fail(
            "set WORK_QUEUE_URL and DEDUP_TABLE (the stack's outputs WorkQueueUrl and \
             LedgerTableName), and DEAD_LETTER_QUEUE_URL unless it is WORK_QUEUE_URL-dlq; or, \
             on PostgreSQL, DATABASE_URL and WORK_QUEUE_NAME",
        ));
    };
    let dead_letters = env("DEAD_LETTER_QUEUE_URL").unwrap_or_else(|| format!("{work}-dlq"));
    Ok(super::runtime().block_on(async {
        let sqs = sqs::client_from_env(CallBudget::Worker).await;
        let dynamodb = crate::ledger::dynamo::client_from_env().await;
        let queues = Queues {
            sqs: &sqs,
            dead_letters: &dead_letters,
            work: &work,
            dynamodb: &dynamodb,
            table: &table,
        };
        redrive(&queues, options).await
    }))
}

/// `redrive` on PostgreSQL: the queue `name`'s dead letters, the ledger in the same database.
fn redrive_postgres(url: &str, name: &str, options: &Options) -> Result<Report, String> {
    let database = crate::postgres::Database::connect(url, 2).map_err(|e| e.to_string())?;
    let queue = crate::queue::PostgresQueue::new(
        database.clone(),
        name,
        crate::config::DEFAULT_MAX_RECEIVES,
    );
    let ledger = crate::ledger::PostgresLedger::new(database);
    Ok(super::runtime().block_on(async {
        let letters = PostgresDeadLetters::new(&queue, options.max);
        redrive_with(&letters, &ledger, options).await
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(now_ms: u64) -> Options {
        Options {
            dry_run: true,
            max: 100,
            ttl: Duration::from_secs(90_000),
            now_ms,
            visibility: RECEIVE_VISIBILITY,
        }
    }

    fn command(v: u32, received_at_ms: u64) -> String {
        serde_json::json!({
            "v": v,
            "form": "command=%2Fonce&text=hi&team_id=T1&user_id=U1&channel_id=C1&api_app_id=A1\
                     &response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1%2F1%2Fx\
                     &trigger_id=1.2.3",
            "received_at_ms": received_at_ms,
        })
        .to_string()
    }

    #[test]
    fn a_command_near_the_end_of_its_response_urls_half_hour_is_refused() {
        let now = 10_000_000_000;
        assert!(
            request_of(&command(2, now - 60_000), &options(now))
                .refused
                .is_none()
        );
        let old = request_of(&command(2, now - 26 * 60_000), &options(now));
        assert!(old.refused.unwrap().contains("response_url expired"));
    }

    #[test]
    fn a_form_whose_view_needed_the_trigger_is_refused() {
        let now = 10_000_000_000;
        let r = request_of(&command(3, now - 1_000), &options(now));
        assert!(r.refused.unwrap().contains("trigger_id"));
    }

    #[test]
    fn an_event_past_the_ledgers_memory_is_refused_and_a_recent_one_is_not() {
        let now = 10_000_000_000;
        let event = |received_at_ms: u64| {
            serde_json::json!({
                "v": 1,
                "envelope": {"type": "event_callback", "event_id": "Ev1", "team_id": "T1",
                    "api_app_id": "A1", "event_time": 1,
                    "event": {"type": "app_mention", "user": "U1", "text": "hi",
                        "channel": "C1", "ts": "1.000100", "event_ts": "1.000100"}},
                "received_at_ms": received_at_ms,
            })
            .to_string()
        };
        let fresh = request_of(&event(now - 3_600_000), &options(now));
        assert!(fresh.refused.is_none());
        assert_eq!(fresh.kind, "app_mention");
        assert_eq!(fresh.keys.len(), 2, "the message's key and the event's");
        let old = request_of(&event(now - 89_000_000), &options(now));
        assert!(old.refused.unwrap().contains("past the ledger's memory"));
    }

    #[test]
    fn a_format_this_release_does_not_read_is_refused() {
        let r = request_of(r#"{"v":99,"received_at_ms":1}"#, &options(2));
        assert!(r.refused.unwrap().contains("format 99"));
        let r = request_of("not json", &options(2));
        assert!(r.refused.unwrap().contains("not a queued request"));
    }
}
