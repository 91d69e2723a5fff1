//! A fleet's traffic, simulated (`scripts/simulate.sh`): the soak bot (examples/soak.rs) with
//! the approval step of Workflow Builder (examples/approval.rs) and `/count` (a change to the
//! app's state), under the soak's mix of requests and those, every request with its copies,
//! retries, redeliveries and faults drawn from the seed, on the explorer's virtual time, in one
//! process (`slack_once::testing::explore::Simulation`), checked by every invariant the
//! explorer checks; per kind of request, what became of them, and the first failure shrunk.
//!
//!   scripts/simulate.sh --requests 1000000 --seed 1
//!
//! Options: `--requests N` (100,000), `--seed S` (1), `--threads N` (the machine's cores),
//! `--faults RATE` (every fault a call can meet, with `RATE` in all at each call, rather than
//! the soak's faults), `--mix fleet|soak` (the soak's mix, or with Workflow Builder steps
//! approved by a click and changes to the app's state beside it: `fleet`, the default),
//! `--installed PER_MILLE` (the share of schedules in which the app is
//! installed through OAuth, its token rotating and Slack's history limit on: 200; the soak
//! has none, so `--installed 0` is the mix the soak is compared with), `--only N` (schedule N of the
//! seed alone, as a failure names it), `--plant lease|around|finish` (a defect planted, to see
//! it found: every process's leases past its deadline, the mention listener posting through
//! an HTTP client of its own when it takes a request over, or a takeover's completion dropped
//! by the ledger and answered as made).

use std::time::Duration;

use serde_json::json;
use slack_once::app::{Ack, App, AppMention, Command, Ctx, HandlerResult, Respond};
use slack_once::testing::explore::{FaultRates, Request, Simulation};

/// glibc's allocator is a third of the simulation's time (`perf`: malloc, free and their
/// consolidation); mimalloc takes less of it (docs/benchmarks.md). The example's own, not the
/// test binaries' that include this file.
#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "soak.rs"]
#[allow(dead_code)]
pub mod soak;

#[path = "approval.rs"]
#[allow(dead_code)]
pub mod approval;

/// The state name `/count` counts under.
pub const COUNT: &str = "count";

/// `/count`: one more in the app's state (the workspace's), answered in the channel with the
/// count. Once per request, whatever runs it again.
async fn count(ctx: Ctx, _command: Command) -> HandlerResult {
    ctx.ack(Ack::empty()).await?;
    let month = Duration::from_secs(30 * 86_400);
    let n = ctx
        .state()
        .update(COUNT, month, |n: Option<u64>| n.unwrap_or(0) + 1)
        .await?;
    ctx.respond(Respond::in_channel(format!("That makes {n}.")))
        .await?;
    Ok(())
}

/// The fleet's bot: the soak bot, the approval step of Workflow Builder (a step that waits for
/// a click) and `/count`, a change to the app's state.
pub fn fleet_app() -> App {
    fleet_app_but_count().command("/count", count)
}

/// The fleet's bot without `/count` (for a test's own).
pub fn fleet_app_but_count() -> App {
    soak::app()
        .function(approval::function(), approval::ask)
        .action(approval::APPROVE, approval::approve)
        .action(approval::REJECT, approval::reject)
        .view_submission(approval::REJECT_VIEW, approval::rejected)
}

/// The whole fleet's mix: the soak's, and per 1,060 requests 30 Workflow Builder steps, each
/// approved by a click in its DM once its message is there (in 5 of them the approver's click
/// is a double click, in 5 a second approver clicks at the same moment), and 30 `/count`; with
/// the invariant of the count: one per `/count` (one when its answer is in Slack). A step
/// completed at most once is the explorer's own invariant.
pub fn fleet_mix(simulation: Simulation) -> Simulation {
    let inputs = json!({"approver": "U0APPROVER", "summary": "Ship the release"});
    let step = || {
        (
            "workflow step",
            Request::step(approval::CALLBACK_ID, inputs.clone()),
        )
    };
    let approval_by = |user: &str| {
        Request::click(approval::APPROVE, "approve")
            .as_user(user)
            .in_channel("DU0APPROVER")
            .on_posted_message()
            .in_step()
    };
    let click = || ("its approval click", approval_by("U0APPROVER"));
    soak_mix(simulation)
        .mix(20, [step(), click()])
        .mix(
            5,
            [
                step(),
                click(),
                (
                    "a double click's second click",
                    approval_by("U0APPROVER").with_previous(),
                ),
            ],
        )
        .mix(
            5,
            [
                step(),
                click(),
                (
                    "a second approver's click",
                    approval_by("U0DEPUTY").with_previous(),
                ),
            ],
        )
        .mix(30, [("state change", Request::command("/count", ""))])
        // A step completed at most once is the explorer's own invariant (every completion
        // Slack was sent, a second only where a fault may have lost the first's answer): Slack
        // itself refuses a second, so its count of completions could not show one.
        .invariant("a state change once per request", |end| {
            let n = end.state::<u64>(COUNT).unwrap_or(0);
            let answered = end.messages.iter().any(|m| {
                m["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("That makes"))
            });
            match (n, answered) {
                (0 | 1, false) | (1, true) => Ok(()),
                _ => Err(format!(
                    "the count is {n} after one /count{}",
                    if answered { " answered" } else { "" }
                )),
            }
        })
}

/// The soak's mix (tests/api/soak/mix.rs), per mille of requests: 300 mentions (150 also
/// delivered as their `message` event, 30 of those with a phantom copy under another `ts`),
/// 120 questions to the assistant (12 with a phantom copy), 150 `/once`, 120 clicks on the
/// button of a mention's answer, 100 submissions of the note modal (a double submit is the
/// repeated story), 210 events no listener takes (a reaction, a message nobody asked the bot
/// about).
pub fn soak_mix(simulation: Simulation) -> Simulation {
    let note = json!({
        "id": "VSOAKNOTE", "type": "modal", "callback_id": soak::NOTE,
        "title": {"type": "plain_text", "text": "Note"},
    });
    let values = json!({soak::NOTE_BLOCK: {soak::NOTE_INPUT:
        {"type": "plain_text_input", "value": "the deploy is done"}}});
    let mention = || Request::mention("is the build green?");
    let click = || Request::click(soak::HELPFUL, "helpful").on_posted_message();
    let question = || Request::assistant_question("why is the sky blue?");
    simulation
        .mix(30, [("mention", mention())])
        .mix(60, [("mention", mention().without_phantom())])
        .mix(90, [("mention", mention().without_copies())])
        .mix(
            60,
            [
                ("mention", mention().without_phantom()),
                ("button click", click()),
            ],
        )
        .mix(
            60,
            [
                ("mention", mention().without_copies()),
                ("button click", click()),
            ],
        )
        .mix(12, [("assistant question", question())])
        .mix(108, [("assistant question", question().without_copies())])
        .mix(
            150,
            [("slash command", Request::command("/once", "ship it"))],
        )
        .mix(
            100,
            [("view submission", Request::view_submission(note, values))],
        )
        .mix(
            110,
            [(
                "event no listener takes",
                Request::event(json!({
                    "type": "reaction_added", "user": "U0USER", "reaction": "eyes",
                    "item": {"type": "message", "channel": "C0TEST", "ts": "1767225500.000100"},
                    "event_ts": "1767225600.000200",
                }))
                .unhandled(),
            )],
        )
        .mix(
            100,
            [(
                "event no listener takes",
                Request::message("lunch, anyone?")
                    .without_copies()
                    .unhandled(),
            )],
        )
}

/// A defect planted: a bot whose mention listener, when it takes a request over (an earlier
/// run claimed it and died), also posts through an HTTP client of its own, around the journal.
pub fn writing_around_the_journal() -> App {
    async fn mention(ctx: Ctx, m: AppMention) -> HandlerResult {
        if ctx.attempt().await > 1 {
            let form = format!("channel={}&thread_ts={}&text=taken+over", m.channel, m.ts);
            post_around(&slack_once::slack::api_url(), "chat.postMessage", &form)?;
        }
        ctx.reply(format!(
            "<@{}> asked.",
            m.user.as_deref().unwrap_or("there")
        ))
        .await?;
        Ok(())
    }
    App::new().app_mention(mention)
}

/// An HTTP/1.1 POST of a form to `{base}/{method}` on a socket of its own (a bot's own client).
fn post_around(base: &str, method: &str, form: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let rest = base.strip_prefix("http://").unwrap_or(base);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(host)?;
    write!(
        stream,
        "POST /{path}/{method} HTTP/1.1\r\nhost: {host}\r\ncontent-type: \
         application/x-www-form-urlencoded\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{form}",
        form.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

#[allow(dead_code)]
fn main() -> std::process::ExitCode {
    let given: Vec<String> = std::env::args().skip(1).collect();
    // What chose the schedules (all but --only and --threads, which change none of them), for
    // a failure's "run it again".
    let mut replay = String::from("scripts/simulate.sh");
    let mut rest = given.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--only" | "--threads" => {
                rest.next();
            }
            _ => {
                replay.push(' ');
                replay.push_str(arg);
            }
        }
    }
    if !given.iter().any(|a| a == "--seed") {
        replay.push_str(" --seed 1");
    }
    let mut args = given.into_iter();
    let (mut requests, mut seed, mut threads, mut rate, mut only, mut plant) =
        (100_000u64, 1u64, None, None, None, None::<String>);
    let mut installed = 200u64;
    let mut mix = String::from("fleet");
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--requests" => requests = value().replace(['_', ','], "").parse().unwrap_or(0),
            "--seed" => seed = value().parse().unwrap_or(1),
            "--threads" => threads = value().parse().ok(),
            "--faults" => rate = value().parse::<f64>().ok(),
            "--only" => only = value().parse::<u64>().ok(),
            "--plant" => plant = Some(value()),
            "--installed" => installed = value().parse().unwrap_or(200),
            "--mix" => mix = value(),
            "-h" | "--help" => {
                println!(
                    "usage: simulate [--requests N] [--seed S] [--threads N] [--faults RATE] [--only N] [--plant lease|around|finish] [--mix fleet|soak] [--installed PER_MILLE]"
                );
                return std::process::ExitCode::SUCCESS;
            }
            other => {
                eprintln!("simulate: unexpected argument {other} (--help)");
                return std::process::ExitCode::from(2);
            }
        }
    }
    if requests == 0 {
        eprintln!("simulate: --requests takes a positive number");
        return std::process::ExitCode::from(2);
    }
    let mut s = match plant.as_deref() {
        None | Some("lease" | "finish") if mix == "soak" => {
            soak_mix(Simulation::new(soak::app).old_version(soak::app))
        }
        None | Some("lease" | "finish") if mix == "fleet" => {
            fleet_mix(Simulation::new(fleet_app).old_version(fleet_app))
        }
        None | Some("lease" | "finish") => {
            eprintln!("simulate: --mix takes fleet or soak, not {mix}");
            return std::process::ExitCode::from(2);
        }
        // Mentions only: the defective bot takes nothing else.
        Some("around") => Simulation::new(writing_around_the_journal)
            .mix(1, [("mention", Request::mention("is the build green?"))]),
        Some(other) => {
            eprintln!("simulate: --plant takes lease, around or finish, not {other}");
            return std::process::ExitCode::from(2);
        }
    };
    s = s
        .requests(requests)
        .seed(seed)
        .installed(installed)
        .replay_command(replay)
        .progress();
    if plant.as_deref() == Some("lease") {
        s = s.plant_lease_past_deadline(Duration::from_secs(60));
    }
    if plant.as_deref() == Some("finish") {
        s = s.plant_dropped_takeover_finish();
    }
    if let Some(n) = threads {
        s = s.threads(n);
    }
    if let Some(rate) = rate {
        s = s.faults(FaultRates::uniform(rate));
    }
    if let Some(n) = only {
        s = s.only(n);
    }
    let report = s.run();
    println!("{report}");
    if report.failure.is_some() {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
