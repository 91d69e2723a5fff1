//! Setting a deployment up: `create-table` (the ledger's table), `create-queue` (deferred
//! mode's work queue and its dead-letter queue) and `import-token` (a single workspace's bot
//! token kept as that workspace's installation, when moving to multi-workspace mode).

use std::process::ExitCode;

use super::args::{Args, Item, Spec, env};
use super::runtime;
use crate::errors::error_chain;
use crate::ledger::DynamoLedger;
use crate::queue::SqsQueue;
use crate::queue::sqs::{self, CallBudget};
use crate::workspaces::UnscopedFound;
use crate::workspaces::seal::Seal;

/// `create-table [TABLE]`.
pub static CREATE_TABLE: Spec = Spec {
    name: "create-table",
    about: "create the ledger table (DEDUP_TABLE) where AWS_ENDPOINT_URL points;\n\
            with DATABASE_URL, migrate PostgreSQL's schema to this release's",
    operands: &[Item {
        name: "[TABLE]",
        help: "the table's name (default: DEDUP_TABLE)",
    }],
    options: &[],
    env: &[
        Item {
            name: "DATABASE_URL",
            help: "PostgreSQL (no TABLE given): its schema migrated",
        },
        Item {
            name: "DEDUP_TABLE",
            help: "the table's name, when TABLE is not given",
        },
        Item {
            name: "AWS_ENDPOINT_URL",
            help: "a local DynamoDB (DynamoDB Local); unset: AWS",
        },
    ],
};

/// `create-queue NAME`.
pub static CREATE_QUEUE: Spec = Spec {
    name: "create-queue",
    about: "create the work queue NAME and its dead-letter queue NAME-dlq\n\
            where AWS_ENDPOINT_URL_SQS points; prints WORK_QUEUE_URL",
    operands: &[Item {
        name: "NAME",
        help: "the work queue's name",
    }],
    options: &[],
    env: &[
        Item {
            name: "WORK_QUEUE_MAX_RECEIVES",
            help: "receives before a message goes to the dead-letter queue (default 10)",
        },
        Item {
            name: "AWS_ENDPOINT_URL_SQS",
            help: "a local SQS server; unset: AWS",
        },
    ],
};

/// `import-token`.
pub static IMPORT_TOKEN: Spec = Spec {
    name: "import-token",
    about: "keep SLACK_BOT_TOKEN as its workspace's installation of this app in DEDUP_TABLE\n\
            or DATABASE_URL (moving to multi-workspace mode: DEPLOY.md), sealed with\n\
            SLACK_TOKEN_KEY_ID or SLACK_TOKEN_KEYS; nothing if one is there",
    operands: &[],
    options: &[Item {
        name: "--plaintext",
        help: "without a token key, keep the token in the table as it is (readable by \
               anyone who can read the table)",
    }],
    env: &[
        Item {
            name: "SLACK_BOT_TOKEN",
            help: "the token to keep",
        },
        Item {
            name: "DEDUP_TABLE",
            help: "the ledger's table, where installations are kept",
        },
        Item {
            name: "DATABASE_URL",
            help: "or PostgreSQL, where installations are kept (migrated first)",
        },
        Item {
            name: "SLACK_CLIENT_ID",
            help: "the app's client id: installations are kept per app",
        },
        Item {
            name: "SLACK_TOKEN_KEY_ID",
            help: "the KMS key the token is sealed with (unset: refused, unless --plaintext)",
        },
        Item {
            name: "SLACK_TOKEN_KEYS",
            help: "or keys of your own to seal it with (ID=BASE64; or SLACK_TOKEN_KEYS_FILE)",
        },
        Item {
            name: "SLACK_API_URL",
            help: "Slack's Web API (default https://slack.com/api)",
        },
    ],
};

/// The token seal the environment names: KMS (`SLACK_TOKEN_KEY_ID`) or keys of the operator's
/// (`SLACK_TOKEN_KEYS`, `SLACK_TOKEN_KEYS_FILE`), read as the server reads them.
enum TokenSeal {
    Kms(String),
    Keys(crate::workspaces::seal::TokenKeys),
}

impl TokenSeal {
    /// The variable that set it.
    fn variable(&self) -> &'static str {
        match self {
            TokenSeal::Kms(_) => "SLACK_TOKEN_KEY_ID",
            TokenSeal::Keys(_) => "SLACK_TOKEN_KEYS",
        }
    }

    async fn seal(self) -> Seal {
        match self {
            TokenSeal::Kms(key) => Seal::kms_from_env(key).await,
            TokenSeal::Keys(keys) => Seal::local(keys),
        }
    }
}

/// The token seal the environment names, if any; a refusal says why, naming the variables
/// (never a key).
fn token_seal_of_env() -> Result<Option<TokenSeal>, String> {
    let get = |name: &str| std::env::var(name).ok();
    let kms = crate::config::token_key_id_of(&get).map_err(|e| e.to_string())?;
    let keys = crate::config::token_keys_of(&get, kms.is_some()).map_err(|e| e.to_string())?;
    Ok(match (kms, keys) {
        (Some(key), _) => Some(TokenSeal::Kms(key)),
        (None, Some(keys)) => Some(TokenSeal::Keys(keys)),
        (None, None) => None,
    })
}

/// `new-token-key [--id ID]`.
pub static NEW_TOKEN_KEY: Spec = Spec {
    name: "new-token-key",
    about: "print a new random key to seal installations' tokens without KMS, as\n\
            ID=BASE64 (an entry of SLACK_TOKEN_KEYS: put it first to seal with it)",
    operands: &[],
    options: &[Item {
        name: "--id ID",
        help: "the key's id (default: key-YYYYMMDD, today's date in UTC)",
    }],
    env: &[],
};

/// Runs `new-token-key`: the key goes to standard output only.
pub fn new_token_key(args: &Args) -> ExitCode {
    let id = match args.value("--id") {
        Some(id) => id.to_string(),
        None => {
            let (year, month, day) = civil_date(crate::clock::now_ms() / 86_400_000);
            format!("key-{year:04}{month:02}{day:02}")
        }
    };
    let entry = crate::workspaces::seal::TokenKeys::new_entry(&id);
    // The entry is read back as a key would be: an id the keys refuse is refused here.
    if let Err(e) = crate::workspaces::seal::TokenKeys::parse(&entry) {
        return args.fail(&format!("--id: {e}"));
    }
    super::say(format_args!("{entry}"));
    ExitCode::SUCCESS
}

/// The calendar date (UTC) `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// `seal-installations [--dry-run] [--app APP_ID]`.
pub static SEAL_INSTALLATIONS: Spec = Spec {
    name: "seal-installations",
    about: "seal with KMS (SLACK_TOKEN_KEY_ID) or SLACK_TOKEN_KEYS the tokens of this app's\n\
            installations still kept as they are (or under an older key of SLACK_TOKEN_KEYS),\n\
            and move its unscoped ones (keyed without the app) to the app's own key: once\n\
            no release that reads them there runs",
    operands: &[],
    options: &[
        Item {
            name: "--dry-run",
            help: "say what would be sealed and moved, change nothing",
        },
        Item {
            name: "--app APP_ID",
            help: "the app's id (A…), which its unscoped items name (default: SLACK_APP_ID, else as the app's own items name it)",
        },
    ],
    env: &[
        Item {
            name: "DEDUP_TABLE",
            help: "the ledger's table, where installations are kept",
        },
        Item {
            name: "SLACK_CLIENT_ID",
            help: "the app's client id: only its installations are touched",
        },
        Item {
            name: "SLACK_TOKEN_KEY_ID",
            help: "the KMS key to seal with (the stack's output TokenKeyId)",
        },
        Item {
            name: "SLACK_TOKEN_KEYS",
            help: "or keys of your own (ID=BASE64, the first seals; or SLACK_TOKEN_KEYS_FILE): \
                   tokens sealed under a later key than the first are sealed again under it",
        },
        Item {
            name: "SLACK_APP_ID",
            help: "as --app",
        },
    ],
};

/// Runs `seal-installations`.
pub fn seal_installations(args: &Args) -> ExitCode {
    let (Some(table), Some(client_id)) = (env("DEDUP_TABLE"), env("SLACK_CLIENT_ID")) else {
        return args.fail(
            "set DEDUP_TABLE, SLACK_CLIENT_ID (the app whose installations to seal) and \
             SLACK_TOKEN_KEY_ID (the KMS key: the stack's output TokenKeyId) or SLACK_TOKEN_KEYS",
        );
    };
    let key = match token_seal_of_env() {
        Ok(Some(key)) => key,
        Ok(None) => {
            return args.fail(
                "set SLACK_TOKEN_KEY_ID (the KMS key: the stack's output TokenKeyId), or \
                 SLACK_TOKEN_KEYS or SLACK_TOKEN_KEYS_FILE (keys of your own)",
            );
        }
        Err(e) => return args.fail(&e),
    };
    let app_id = args
        .value("--app")
        .map(str::to_string)
        .or_else(|| env("SLACK_APP_ID"));
    let dry_run = args.flag("--dry-run");
    runtime().block_on(async {
        let client = crate::ledger::dynamo::client_from_env().await;
        let seal = key.seal().await;
        let store = crate::workspaces::DynamoInstallations::new(client, table, client_id.trim())
            .with_seal(std::sync::Arc::new(seal));
        match store.seal_all(app_id.as_deref(), dry_run).await {
            Ok(done) => {
                let (seal_verb, move_verb) = match dry_run {
                    true => ("would seal", "would move"),
                    false => ("sealed", "moved"),
                };
                for pk in &done.sealed {
                    say!("{seal_verb} {pk}");
                }
                for pk in &done.moved {
                    say!("{move_verb} {pk} to the app's own key, sealed");
                }
                for pk in &done.undecided {
                    say!(
                        "left {pk}: it names no app (an import): run import-token with its \
                         workspace's token to keep it as this app's, sealed"
                    );
                }
                for pk in &done.changed {
                    say!("left {pk}: it changed meanwhile: run this again");
                }
                // Without the app's id, an unscoped item naming an app is counted another's,
                // the app's own among them.
                if done.app_id.is_none() && (!done.undecided.is_empty() || done.others > 0) {
                    say!("the app's id is not known: give --app A… to move what names it");
                }
                say!(
                    "{} {seal_verb}, {} {move_verb}, {} sealed already, {} left, {} other apps' \
                     passed over{}",
                    done.sealed.len(),
                    done.moved.len(),
                    done.sealed_already,
                    done.undecided.len() + done.changed.len(),
                    done.others,
                    if dry_run {
                        ": a dry run, nothing changed"
                    } else {
                        ""
                    }
                );
                ExitCode::SUCCESS
            }
            Err(error) => args.failed(&error_chain(&error)),
        }
    })
}

/// Runs `create-table`: on PostgreSQL (`DATABASE_URL` set and no table named), applies the
/// migrations the schema lacks.
pub fn create_table(args: &Args) -> ExitCode {
    if let (None, Some(url)) = (args.operand(0), env("DATABASE_URL")) {
        return migrate(args, &url);
    }
    let Some(table) = args
        .operand(0)
        .map(str::to_string)
        .or_else(|| env("DEDUP_TABLE"))
    else {
        return args.fail("name the table, or set DEDUP_TABLE");
    };
    runtime().block_on(async {
        let client = crate::ledger::dynamo::client_from_env().await;
        match DynamoLedger::create_table(&client, &table).await {
            Ok(()) => {
                say!("created table {table}");
                ExitCode::SUCCESS
            }
            Err(error) => args.failed(&error_chain(&error)),
        }
    })
}

/// Migrates the PostgreSQL database `url` names to this release's schema.
fn migrate(args: &Args, url: &str) -> ExitCode {
    let database = match crate::postgres::Database::connect(url, 1) {
        Ok(database) => database,
        Err(error) => return args.fail(&error.to_string()),
    };
    runtime().block_on(async {
        match database.migrate().await {
            Ok(applied) => {
                let version = crate::postgres::SCHEMA_VERSION;
                match applied.as_slice() {
                    [] => say!(
                        "the schema of {} is at version {version} already",
                        database.place()
                    ),
                    _ => say!(
                        "migrated {} to version {version} (applied {applied:?})",
                        database.place()
                    ),
                }
                ExitCode::SUCCESS
            }
            Err(error) => args.failed(&error_chain(&error)),
        }
    })
}

/// Runs `create-queue`.
pub fn create_queue(args: &Args) -> ExitCode {
    let name = args.operand(0).unwrap_or_default().to_string();
    let max_receives = match env("WORK_QUEUE_MAX_RECEIVES").map(|v| v.parse::<u32>()) {
        None => crate::config::DEFAULT_MAX_RECEIVES,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => return args.fail("WORK_QUEUE_MAX_RECEIVES is a number of receives (1 or more)"),
    };
    runtime().block_on(async {
        let client = sqs::client_from_env(CallBudget::Ingress).await;
        let visibility = crate::config::DEFAULT_LEASE;
        match SqsQueue::create_with_dead_letters(&client, &name, max_receives, visibility).await {
            Ok((url, dlq)) => {
                eprintln!(
                    "created {name} (dead-letter queue {dlq}, after {max_receives} receives)"
                );
                say!("{url}");
                ExitCode::SUCCESS
            }
            Err(error) => args.failed(&error_chain(&error)),
        }
    })
}

/// The installation store `import-token` keeps the token in: the DynamoDB table (`Ok`) or the
/// PostgreSQL database (`Err`: its URL, its schema checked), sealed with `seal`.
async fn installation_store(
    store: Result<String, String>,
    client_id: &str,
    seal: Seal,
) -> Result<Box<dyn crate::workspaces::InstallationStore>, String> {
    let seal = std::sync::Arc::new(seal);
    Ok(match store {
        Ok(table) => {
            let client = crate::ledger::dynamo::client_from_env().await;
            Box::new(
                crate::workspaces::DynamoInstallations::new(client, table, client_id)
                    .with_seal(seal),
            )
        }
        Err(url) => {
            let database =
                crate::postgres::Database::connect(&url, 1).map_err(|e| e.to_string())?;
            database
                .require_schema()
                .await
                .map_err(|e| error_chain(&e))?;
            Box::new(
                crate::workspaces::PostgresInstallations::new(database, client_id).with_seal(seal),
            )
        }
    })
}

/// Runs `import-token`.
pub fn import_token(args: &Args) -> ExitCode {
    let store = env("DEDUP_TABLE")
        .map(Ok)
        .or_else(|| env("DATABASE_URL").map(Err));
    let (Some(token), Some(store), Some(client_id)) =
        (env("SLACK_BOT_TOKEN"), store, env("SLACK_CLIENT_ID"))
    else {
        return args.fail(
            "set SLACK_BOT_TOKEN (the token to keep), DEDUP_TABLE (or DATABASE_URL for \
             PostgreSQL) and SLACK_CLIENT_ID (the app's client id: each app's installations \
             are its own)",
        );
    };
    let key = match token_seal_of_env() {
        Ok(key) => key,
        Err(e) => return args.fail(&e),
    };
    let plaintext = args.flag("--plaintext");
    match (&key, plaintext) {
        (None, false) => {
            return args.fail(
                "set SLACK_TOKEN_KEY_ID (the stack's output TokenKeyId) or SLACK_TOKEN_KEYS to \
                 seal the token, or pass --plaintext to keep it in the table as it is, readable \
                 by anyone who can read the table",
            );
        }
        (Some(key), true) => {
            return args.fail(&format!(
                "{} is set and --plaintext given: the token is sealed with the key, or kept as \
                 it is without one; unset one of them",
                key.variable()
            ));
        }
        _ => {}
    }
    let api = env("SLACK_API_URL").unwrap_or_else(|| crate::config::DEFAULT_SLACK_API_URL.into());
    runtime().block_on(async {
        let seal = match key {
            Some(key) => key.seal().await,
            None => {
                eprintln!(
                    "--plaintext: the token is kept in the table as it is (set \
                     SLACK_TOKEN_KEY_ID to the stack's TokenKeyId output to seal it)"
                );
                Seal::none()
            }
        };
        let store = match installation_store(store, client_id.trim(), seal).await {
            Ok(store) => store,
            Err(e) => return args.failed(&e),
        };
        let slack = crate::slack::SlackClient::new(api, None);
        let token = crate::config::Secret::new(token);
        match crate::workspaces::import_token(store.as_ref(), &slack, &token).await {
            Ok(imported) => {
                let id = imported
                    .installation
                    .key()
                    .map(|k| k.id().to_string())
                    .unwrap_or_default();
                match &imported.unscoped {
                    Some(UnscopedFound::Ours) => say!(
                        "this app's installation of {id} is kept unscoped (without the app): \
                         this app's own takes its place"
                    ),
                    Some(UnscopedFound::OtherApp(app)) => say!(
                        "the unscoped installation of {id} is another app's ({}), not this \
                         token's: left to it",
                        app.as_deref().unwrap_or("its app unnamed")
                    ),
                    None => {}
                }
                match imported.kept {
                    true => say!(
                        "imported the installation of {id}, {}",
                        match plaintext {
                            true => "kept as it is",
                            false => "sealed",
                        }
                    ),
                    false => say!(
                        "this app has an installation of {id} stored already: nothing imported"
                    ),
                }
                ExitCode::SUCCESS
            }
            Err(error) => args.failed(&error_chain(&error)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::civil_date;

    #[test]
    fn a_new_token_keys_default_id_is_the_days_date() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(19_782), (2024, 2, 29));
        assert_eq!(civil_date(20_793), (2026, 12, 6));
    }
}
