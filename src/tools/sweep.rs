//! `slack-once sweep`: ends `failed` (`abandoned`, retryable) the claims left in progress past
//! their lease. A process killed during a request's last delivery (a command or an interaction,
//! which Slack sends once; an event's third retry; a queue message's last receive) leaves its
//! item `in_progress` until its TTL: no delivery comes to take it over, so it is never answered
//! nor counted. The sweep counts it, with its reason, and changes nothing else: a `failed`
//! retryable item is claimable exactly as a lapsed claim is, so a delivery that does come later
//! (Slack's Delayed Events, a redrive) takes it over as before, and looks in Slack before
//! writing again (the journal stays). Run it now and then (`--older-than`: how long past its
//! lease a claim must be, 10 minutes by default, past Slack's last retry).
//!
//! A worker's claim of a queued request with receives left (its item says `redelivery`) is left
//! to the queue, which hands the message out again within its visibility timeout: the next
//! receive takes the claim over. Only for [`REDELIVERY_WITHIN`] (SQS's longest visibility
//! timeout, 12 hours) past the cutoff, though: a claim no receive took over by then had its
//! message dead-lettered (and `redrive` refused it or was never run) or deleted, and is swept
//! as any other. A receive that still comes later takes over the `failed` item all the same.

use std::process::ExitCode;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use super::args::{Args, Item, Spec, env};
use crate::ledger::dynamo::attr;

/// The failure code a swept claim ends with.
pub const ABANDONED: &str = "abandoned";

/// How long past its lease a claim is left alone by default: Slack's last retry comes about 5
/// minutes after the event.
pub const DEFAULT_OLDER_THAN: Duration = Duration::from_secs(600);

/// How long past the cutoff a claim marked `redelivery` is left to the queue: SQS's longest
/// visibility timeout, after which a message with receives left has been handed out again
/// (and its claim taken over), or dead-lettered.
pub const REDELIVERY_WITHIN: Duration = Duration::from_secs(12 * 3600);

/// What a sweep found and did.
#[derive(Clone, Debug, Default)]
pub struct Swept {
    /// The keys of the claims ended `failed` (with `--dry-run`: that would be).
    pub keys: Vec<String>,
    /// Items scanned.
    pub scanned: usize,
    /// Lapsed claims of other apps than the one swept, passed over (with no app named, every
    /// claim that names one).
    pub other_apps: usize,
    /// Lapsed claims of queued requests with receives left, passed over: the queue brings them
    /// back (within [`REDELIVERY_WITHIN`] past the cutoff; older ones are swept).
    pub redelivery_due: usize,
}

/// Ends `failed` (`abandoned`, retryable) every claim of the app `app` (and every claim that
/// names no app) in `table` whose lease ended before `now_ms - older_than`, but for claims of
/// queued requests with receives left (for [`REDELIVERY_WITHIN`] more); each conditioned on its owner and lease as read (a
/// takeover in between wins). With `dry_run`, only lists them.
pub async fn sweep(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    app: Option<&str>,
    older_than: Duration,
    now_ms: u64,
    dry_run: bool,
) -> Result<Swept, String> {
    let cutoff = now_ms.saturating_sub(older_than.as_millis() as u64);
    let mut swept = Swept::default();
    let mut start = None;
    loop {
        let page = dynamodb
            .scan()
            .table_name(table)
            // An item of a later format is its release's to end, as a takeover leaves it.
            .filter_expression(
                "#status = :in_progress AND #lease_until < :cutoff \
                 AND (attribute_not_exists(#fmt) OR #fmt <= :fmt_read)",
            )
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#lease_until", attr::LEASE_UNTIL)
            .expression_attribute_names("#fmt", attr::FORMAT)
            .expression_attribute_values(
                ":fmt_read",
                AttributeValue::N(crate::ledger::dynamo::ITEM_FORMAT_READ.to_string()),
            )
            .expression_attribute_values(":in_progress", AttributeValue::S("in_progress".into()))
            .expression_attribute_values(":cutoff", AttributeValue::N(cutoff.to_string()))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| crate::errors::error_chain(&e))?;
        swept.scanned += page.scanned_count().max(0) as usize;
        for item in page.items() {
            let (Some(key), Some(owner), Some(lease)) = (
                item.get(attr::PK).cloned(),
                item.get(attr::OWNER).cloned(),
                item.get(attr::LEASE_UNTIL).cloned(),
            ) else {
                continue;
            };
            let name = key.as_s().cloned().unwrap_or_default();
            let lease_ms: u64 = lease.as_n().ok().and_then(|n| n.parse().ok()).unwrap_or(0);
            let redelivery_due = item
                .get(attr::REDELIVERY)
                .and_then(|v| v.as_bool().ok())
                .copied()
                .unwrap_or(false);
            if redelivery_due
                && lease_ms >= cutoff.saturating_sub(REDELIVERY_WITHIN.as_millis() as u64)
            {
                swept.redelivery_due += 1;
                continue;
            }
            let item_app = item.get(attr::APP).and_then(|v| v.as_s().ok());
            if item_app.is_some_and(|a| Some(a.as_str()) != app) {
                swept.other_apps += 1;
                continue;
            }
            if !dry_run
                && !end_lapsed_claim(dynamodb, table, key, owner, lease, ABANDONED, now_ms).await?
            {
                // Taken over, or finished, since the scan: left as it is now.
                continue;
            }
            swept.keys.push(name);
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(swept);
        }
    }
}

/// [`sweep`] on a ledger in PostgreSQL (`url`): one statement; and the rows past their TTL
/// deleted (PostgreSQL has no TTL of its own; each process deletes them as well, now and then).
async fn sweep_postgres(
    url: &str,
    app: Option<&str>,
    older_than: Duration,
    now_ms: u64,
    dry_run: bool,
) -> Result<Swept, String> {
    let database = crate::postgres::Database::connect(url, 1).map_err(|e| e.to_string())?;
    let ledger = crate::ledger::PostgresLedger::new(database);
    let error = |e: crate::ledger::LedgerError| crate::errors::error_chain(&e);
    let sweep = crate::ledger::Sweep {
        older_than,
        redelivery_within: REDELIVERY_WITHIN,
        app,
        code: ABANDONED,
        dry_run,
    };
    let swept = ledger
        .sweep_abandoned(now_ms, &sweep)
        .await
        .map_err(error)?;
    if !dry_run {
        let deleted = ledger
            .delete_expired(now_ms, crate::stores::EXPIRED_ROWS_BATCH)
            .await
            .map_err(error)?;
        say!("{deleted} rows past their TTL deleted");
    }
    Ok(Swept {
        keys: swept.keys,
        scanned: swept.lapsed,
        other_apps: swept.other_apps,
        redelivery_due: swept.redelivery_due,
    })
}

/// Ends `failed` (`code`, retryable: claimable as a lapsed claim is) the claim at `key` left in
/// progress, conditioned on its `owner` and `lease` as read (a takeover in between wins; its
/// `redelivery` mark removed); whether it did. `sweep`'s and `redrive`'s.
pub(crate) async fn end_lapsed_claim(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    key: AttributeValue,
    owner: AttributeValue,
    lease: AttributeValue,
    code: &str,
    now_ms: u64,
) -> Result<bool, String> {
    let result = dynamodb
        .update_item()
        .table_name(table)
        .key(attr::PK, key)
        .update_expression(
            "SET #status = :failed, #error = :code, #retryable = :true, #failed_at = :now \
             REMOVE #redelivery",
        )
        .condition_expression("#status = :in_progress AND #owner = :owner AND #lease = :lease")
        .expression_attribute_names("#status", attr::STATUS)
        .expression_attribute_names("#error", attr::ERROR)
        .expression_attribute_names("#retryable", attr::RETRYABLE)
        .expression_attribute_names("#failed_at", attr::FAILED_AT)
        .expression_attribute_names("#redelivery", attr::REDELIVERY)
        .expression_attribute_names("#owner", attr::OWNER)
        .expression_attribute_names("#lease", attr::LEASE_UNTIL)
        .expression_attribute_values(":failed", AttributeValue::S("failed".into()))
        .expression_attribute_values(":code", AttributeValue::S(code.into()))
        .expression_attribute_values(":true", AttributeValue::Bool(true))
        .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()))
        .expression_attribute_values(":in_progress", AttributeValue::S("in_progress".into()))
        .expression_attribute_values(":owner", owner)
        .expression_attribute_values(":lease", lease)
        .send()
        .await;
    match result {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(crate::errors::error_chain(&e)),
    }
}

/// `sweep [--dry-run] [--older-than MINUTES]`.
pub static SPEC: Spec = Spec {
    name: "sweep",
    about: "end failed (abandoned, retryable) the claims in DEDUP_TABLE left in\n\
            progress past their lease (10 minutes by default): a request killed\n\
            on its last delivery, counted; a later delivery still takes it over",
    operands: &[],
    options: &[
        Item {
            name: "--dry-run",
            help: "list them, change nothing",
        },
        Item {
            name: "--older-than MINUTES",
            help: "how long past its lease a claim must be (default 10)",
        },
        Item {
            name: "--app APP_ID",
            help: "the app whose claims to sweep (A…; default SLACK_APP_ID): other apps' are left",
        },
    ],
    env: &[
        Item {
            name: "DEDUP_TABLE",
            help: "the ledger's table (the stack's output LedgerTableName)",
        },
        Item {
            name: "DATABASE_URL",
            help: "the ledger in PostgreSQL instead (its expired rows deleted too)",
        },
        Item {
            name: "SLACK_APP_ID",
            help: "as --app; with neither, only claims that name no app are swept",
        },
    ],
};

/// Runs `sweep` with its arguments.
pub fn run(args: &Args) -> ExitCode {
    let older_than = match args.parsed::<u64>("--older-than", "a number of minutes") {
        Ok(minutes) => minutes.map_or(DEFAULT_OLDER_THAN, |m| Duration::from_secs(m * 60)),
        Err(code) => return code,
    };
    let dry_run = args.flag("--dry-run");
    let store = match (env("DEDUP_TABLE"), env("DATABASE_URL")) {
        (Some(table), None) => Ok(table),
        (None, Some(url)) => Err(url),
        _ => {
            return args.fail(
                "set DEDUP_TABLE (the stack's output LedgerTableName), or DATABASE_URL for a \
                 ledger in PostgreSQL (one of them)",
            );
        }
    };
    let app = args
        .value("--app")
        .map(str::to_string)
        .or_else(|| env("SLACK_APP_ID"));
    super::runtime().block_on(async {
        let now_ms = crate::clock::now_ms();
        let swept = match &store {
            Ok(table) => {
                let dynamodb = crate::ledger::dynamo::client_from_env().await;
                sweep(
                    &dynamodb,
                    table,
                    app.as_deref(),
                    older_than,
                    now_ms,
                    dry_run,
                )
                .await
            }
            Err(url) => sweep_postgres(url, app.as_deref(), older_than, now_ms, dry_run).await,
        };
        match swept {
            Ok(swept) => {
                for key in &swept.keys {
                    say!(
                        "{} {key}",
                        if dry_run {
                            "would end failed"
                        } else {
                            "ended failed"
                        }
                    );
                }
                if swept.redelivery_due > 0 {
                    say!(
                        "left {} claims of queued requests with receives left: the queue \
                         brings them back (or dead-letters them, for redrive); swept 12 h on",
                        swept.redelivery_due
                    );
                }
                if swept.other_apps > 0 {
                    say!(
                        "left {} claims of {}",
                        swept.other_apps,
                        match &app {
                            Some(app) => format!("other apps than {app}"),
                            None => "apps (name this app with --app A… to sweep its own)".into(),
                        }
                    );
                }
                say!(
                    "{} claims left in progress past their lease{} ({} items scanned)",
                    swept.keys.len(),
                    if dry_run {
                        ": a dry run, nothing changed"
                    } else {
                        " ended failed (abandoned, retryable)"
                    },
                    swept.scanned
                );
                ExitCode::SUCCESS
            }
            Err(error) => args.failed(&error),
        }
    })
}
