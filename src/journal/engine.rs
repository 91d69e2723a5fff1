//! One step, made: numbered, checked against what earlier claims recorded at its number,
//! settled by the table ([`super::settle`]) where an earlier claim left its fate unknown,
//! announced in the ledger, called, and its result kept for the claim's next write. Each is a
//! phase of its own: `admit`, `settle_earlier`, `announce`, `call_slack`, `record`.

use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::settle::{self, Record, Shows, Verdict};
use super::steps::journal_bytes;
use super::{Error, Returns, Settle, Steps, recordable, slack_ts, step_identity};
use super::{MAX_JOURNAL_BYTES, MAX_REMEMBERED_BYTES, MAX_STEPS};
use crate::journal::record::{Looked, Settled, StepRecord, kept_doubt, step_op};
use crate::slack::{Args, OurApp, ReplyQuery, SlackClient, SlackError, post_metadata};

/// What a step answered with one of its `benign_if_announced` codes records when it had not
/// been announced before (`unannounced:CODE`): its target was gone, not made by an earlier call.
pub(crate) const UNANNOUNCED: &str = "unannounced:";
/// The step name of a post to the request's `response_url`.
pub(crate) const RESPOND: &str = "response_url";
/// Look-up refusals no later delivery gets past: the bot is not in the conversation, or the app
/// lacks the history scope.
const UNLOOKABLE: &[&str] = &["not_in_channel", "channel_not_found", "missing_scope"];
/// A look-up for a message an earlier claim may have posted searches the window from its
/// intent to its lease's end, widened by this much on each side (clocks, Slack's own delay).
const LOOKUP_SLACK_MS: u64 = 5_000;

/// One write, as a listener's context asks for it.
pub(crate) struct Call<'a> {
    pub method: &'a str,
    pub args: Value,
    pub settle: Settle<'a>,
    /// Slack's answers that mean it is done already (`already_reacted`).
    pub benign: &'a [&'a str],
    /// Slack's answers that mean it is done already only when the call was announced before
    /// (an earlier claim's intent, or a claim standing for it, or `announced_elsewhere`): a
    /// step completion answered `execution_not_in_running_state`.
    pub benign_if_announced: &'a [&'a str],
    /// The call was announced by another request's record (a step's decision).
    pub announced_elsewhere: bool,
    pub returns: Returns,
}

/// What the engine needs of the request the step is made for.
pub(crate) struct For<'a> {
    pub slack: &'a SlackClient,
    pub deadline: Instant,
    /// The event's id, or the interaction's key: what a post's metadata names.
    pub source_id: &'a str,
    pub version: &'a str,
    /// This app, as the request names it: only its messages can be ours.
    pub app: OurApp<'a>,
    /// No answer to the request can be older (look-ups of records without times start there).
    pub since_ts: Option<String>,
    /// An event's own conversation (the bot is in it): a look-up there can always be made.
    pub own_channel: Option<&'a str>,
    /// The request's trigger_id can no longer be spent (Slack has been acknowledged).
    pub past_ack: bool,
    /// For a [`RESPOND`]: the request's response_url, checked.
    pub response_url: Option<http::Uri>,
}

/// What a look-up saw, beside its [`Shows`].
enum Seen {
    /// The write found: the answer to take for it.
    Taken(Value),
    Nothing,
    /// Slack could not be asked: why.
    Failed(SlackError),
}

/// What a step came to.
pub(crate) enum Made {
    /// Slack's answer (or the recorded one).
    Answer(Value),
    /// Deferred mode's ingress, before the acknowledgement: this write is a worker's; the
    /// listener hands off here (an empty acknowledgement unless it chose one).
    HandOff,
}

/// Makes one step. See the [module](super).
pub(crate) async fn make(steps: &Mutex<Steps>, r: &For<'_>, call: Call<'_>) -> Result<Made, Error> {
    // While the step is under way (its look-up, its intent, its call) its fate is open: should
    // the listener drop it (a timeout or a select around it), the flag stays set and the claim
    // cannot end done.
    steps.lock().await.in_step += 1;
    let made = make_step(steps, r, call).await;
    let mut steps = steps.lock().await;
    steps.in_step -= 1;
    // A write a later delivery could still make (the failure is one a retry may fix): should
    // the listener carry on past it, the claim cannot end done.
    let retryable = match &made {
        Err(Error::Slack(e)) => !e.is_permanent(),
        Err(Error::Ledger(_) | Error::LookupUnavailable(_)) => true,
        _ => false,
    };
    if retryable {
        steps.doubtful = true;
    }
    made
}

async fn make_step(steps: &Mutex<Steps>, r: &For<'_>, call: Call<'_>) -> Result<Made, Error> {
    // Held for the whole step: steps run one at a time, in the order they are made.
    let mut steps = steps.lock().await;
    let step = admit(&mut steps, r, call)?;
    if let Some(made) = settle_earlier(&mut steps, r, &step).await? {
        return Ok(made);
    }
    if let Some(made) = not_made_here(&mut steps, r, &step)? {
        return Ok(made);
    }
    let announcement = announce(&mut steps, r, &step).await?;
    let answer = call_slack(&mut steps, r, &step).await;
    record(&mut steps, r, step, announcement, answer).await
}

/// A step admitted: its number, what earlier claims recorded at it, and how it is settled.
struct Admitted<'a> {
    method: &'a str,
    args: Value,
    settle: Settle<'a>,
    benign: &'a [&'a str],
    benign_if_announced: &'a [&'a str],
    returns: Returns,
    step: u32,
    op: String,
    /// What earlier claims recorded at the step's number.
    earlier: Option<StepRecord>,
    /// Announced before: by an earlier claim's intent or began window, or by another
    /// request's record.
    announced: bool,
    /// A view opened or pushed with the request's trigger_id.
    trigger_bound: bool,
    kind: settle::Kind,
    /// The claim's began window may stand for the step's intent.
    may_stand: bool,
}

/// Admits a step: the claim still open and no [`remember`] running, its number taken, and no
/// earlier step held back.
fn admit<'a>(steps: &mut Steps, r: &For<'_>, call: Call<'a>) -> Result<Admitted<'a>, Error> {
    let Call {
        method,
        mut args,
        settle,
        benign,
        benign_if_announced,
        announced_elsewhere,
        returns,
    } = call;

    let trigger_bound = matches!(method, "views.open" | "views.push");
    if steps.closed {
        return Err(Error::Closed);
    }
    if let Some(remembering) = inside_remember() {
        return Err(Error::InsideRemember {
            step: remembering,
            method: method.to_string(),
        });
    }
    let op = step_identity(method, &args);
    // The step's number is taken even when held back, so the listener's later steps keep the
    // numbers they have on every run.
    let (step, earlier) = steps.take(&op)?;
    let announced = announced_elsewhere
        || matches!(
            earlier,
            Some(StepRecord::Intent { .. } | StepRecord::Began { .. })
        );
    if steps.held {
        return Err(Error::LookupUnavailable(SlackError::InvalidResponse(
            "an earlier step of this claim is held back: no more writes".into(),
        )));
    }
    if trigger_bound && args["view"]["external_id"].is_null() && args["view"].is_object() {
        // A view's id is known only from Slack's answer; this names it before the call, so a
        // later run can find it (`views.update` by `external_id`) should the answer be lost.
        args["view"]["external_id"] = format!("so-{}-{step}", steps.key).into();
    }
    let kind = settle.kind();
    let in_own = match settle {
        Settle::Lookup { channel, .. } | Settle::Stream { channel, .. } => {
            method != RESPOND && r.own_channel == Some(channel)
        }
        // A view is found by its external_id, whatever the scopes.
        Settle::View => true,
        _ => false,
    };
    Ok(Admitted {
        method,
        args,
        settle,
        benign,
        benign_if_announced,
        returns,
        step,
        op,
        earlier,
        announced,
        trigger_bound,
        kind,
        may_stand: settle::may_stand(kind, in_own),
    })
}

/// What the journal holds at a step's number, as the settle table reads it.
fn record_of(earlier: Option<&StepRecord>, kind: settle::Kind, may_stand: bool) -> Record {
    match earlier {
        None => Record::None,
        Some(StepRecord::Done { .. }) => Record::Done,
        // A doubt a claim kept from began windows stands for a step as they did.
        Some(intent @ StepRecord::Intent { .. }) => match kept_doubt(intent) {
            Some(announces) if !may_stand && (announces || kind == settle::Kind::AtMostOnce) => {
                Record::BeganNotForIt
            }
            _ => Record::Intent,
        },
        // A step that announces itself: the claims of the window wrote its intent first if
        // they made it (at-most-once steps always did; the rest since this version).
        Some(StepRecord::Began { announces, .. })
            if !may_stand && (*announces || kind == settle::Kind::AtMostOnce) =>
        {
            Record::BeganNotForIt
        }
        Some(StepRecord::Began { .. }) => Record::Began,
    }
}

/// Settles what earlier claims left at the step's number by the table ([`settle::verdict`]),
/// looking in Slack where it says to: `Some` when that settles the step (replayed, taken
/// from Slack, or unconfirmed), `None` when the step is to be made.
async fn settle_earlier(
    steps: &mut Steps,
    r: &For<'_>,
    s: &Admitted<'_>,
) -> Result<Option<Made>, Error> {
    let (step, method) = (s.step, s.method);
    let record = record_of(s.earlier.as_ref(), s.kind, s.may_stand);
    let shows = match (&s.earlier, settle::looks(s.kind, record)) {
        (Some(found), true) => Some(match s.settle {
            Settle::View => look_for_view(r, step, &s.args).await,
            _ => look(steps, r, step, found, s.settle).await,
        }),
        _ => None,
    };
    let verdict = settle::verdict(
        s.kind,
        record,
        shows.as_ref().map(|s| s.0),
        steps.last_chance,
    );
    if record == Record::BeganNotForIt {
        steps.began_settled = true;
    }
    match verdict {
        Verdict::Replay => return Ok(Some(replay(steps, step, method, s.earlier.as_ref()))),
        Verdict::Taken => {
            let Some((_, Seen::Taken(answer))) = shows else {
                unreachable!("a step taken was found")
            };
            steps.began_settled |= record == Record::Began;
            return Ok(Some(Made::Answer(
                steps.settled_earlier(step, &s.op, answer),
            )));
        }
        Verdict::Unconfirmed => {
            steps.began_settled |= record == Record::Began;
            tracing::warn!(
                step,
                method,
                "an earlier claim may have made this write, and Slack cannot show whether: not \
                 made again, and the request ends failed (unconfirmed_write)"
            );
            let answer = json!({"ok": true, "unknown": true});
            steps.settled_earlier(step, &s.op, answer.clone());
            steps.tally.settled -= 1;
            steps.tally.unconfirmed += 1;
            return Ok(Some(Made::Answer(answer)));
        }
        Verdict::Hold => {
            let Some((_, Seen::Failed(error))) = shows else {
                unreachable!("a step held could not be looked for")
            };
            steps.held = true;
            return Err(Error::LookupUnavailable(error));
        }
        Verdict::Make => {
            if record == Record::Began {
                steps.began_settled = true;
            }
            match (&s.earlier, s.kind) {
                (Some(_), settle::Kind::Idempotent) => tracing::info!(
                    step,
                    method,
                    "an earlier claim may have made this call: making it again (harmless)"
                ),
                (Some(StepRecord::Intent { .. } | StepRecord::Began { .. }), _)
                    if shows.is_some() =>
                {
                    tracing::info!(step, "the earlier claim's message is not in Slack: posting")
                }
                _ => {}
            }
        }
    }
    Ok(None)
}

/// The answer an earlier claim recorded done for step `step`, given again without a call.
fn replay(steps: &mut Steps, step: u32, method: &str, earlier: Option<&StepRecord>) -> Made {
    tracing::debug!(
        step,
        method,
        "recorded done by an earlier claim: not made again"
    );
    let result = match earlier {
        Some(StepRecord::Done { result, .. }) => result.as_str(),
        _ => "",
    };
    let answer: Value = serde_json::from_str(result).unwrap_or_else(|_| json!({"ok": true}));
    // Settled unconfirmed by an earlier claim: still unknown, still not answered.
    if answer.get("unknown") == Some(&Value::Bool(true)) {
        steps.tally.unconfirmed += 1;
    } else {
        steps.tally.settled += 1;
    }
    Made::Answer(answer)
}

/// A step this run does not make: deferred mode's ingress hands every write but a view to a
/// worker, and a view past the acknowledgement has no trigger left to open it with.
fn not_made_here(steps: &mut Steps, r: &For<'_>, s: &Admitted<'_>) -> Result<Option<Made>, Error> {
    let (step, method) = (s.step, s.method);
    if steps.provisional && !s.trigger_bound {
        // Deferred mode's ingress: what follows is a worker's. The listener hands off here,
        // and this step is made again (numbered the same) by the worker's run.
        steps.next -= 1;
        return Ok(Some(Made::HandOff));
    }
    if s.trigger_bound && r.past_ack {
        // Not made: the trigger_id has been spent or has expired.
        tracing::warn!(
            step,
            method,
            "a view needs the request's trigger_id, which is valid only before the \
             acknowledgement: not made (open views before ctx.ack)"
        );
        return Err(Error::Slack(SlackError::Api {
            code: "expired_trigger_id".into(),
        }));
    }
    Ok(None)
}

/// A step's intent, as it was announced before its call.
struct Announcement {
    intent: StepRecord,
    /// The claim's began window stands for the intent: the ledger holds none of its own.
    stands: bool,
}

/// Announces the step before its call: its intent written to the ledger, conditioned on the
/// owner, or carried by the claim's began window (or, with no claim, by the hand-off).
async fn announce(steps: &mut Steps, r: &For<'_>, s: &Admitted<'_>) -> Result<Announcement, Error> {
    let step = s.step;
    let now_ms = steps.now_ms();
    let intent = StepRecord::Intent {
        attempt: steps.attempt,
        op: Some(s.op.clone()),
        at_ms: Some(now_ms),
        lease_until_ms: Some(steps.lease_until_ms),
        looked: None,
    };
    let after = steps.after(step, &intent);
    if step > MAX_STEPS || journal_bytes(&after) > MAX_JOURNAL_BYTES {
        return Err(Error::JournalFull { step });
    }
    // The claim stands for the intent of its first new step while it has written nothing
    // since; any other step records its intent first, conditioned on the owner, with the
    // fates learnt so far: no write to Slack without a claim still held.
    let stands = step == steps.covered && steps.began_stands && s.may_stand && !steps.provisional;
    if steps.provisional {
        // No claim to announce it in: the trigger_id is Slack's own once-only guard. Should
        // the hand-off cut the call off, the worker gets it as unknown, and looks.
        steps.in_flight = Some((step, intent.clone()));
    } else if stands {
        steps.in_flight = Some((step, intent.clone()));
    } else {
        steps.write(step, &intent, r.deadline).await?;
        steps.journal.insert(step, intent.clone());
    }
    Ok(Announcement { intent, stands })
}

/// Makes the step's call to Slack (or to the request's response_url), a post named in its
/// metadata so that a later claim can look for it.
async fn call_slack(steps: &mut Steps, r: &For<'_>, s: &Admitted<'_>) -> Result<Value, SlackError> {
    let mut args = s.args.clone();
    if matches!(s.settle, Settle::Lookup { .. }) {
        let names = json!({
            "key": steps.key.as_str(),
            "event_id": r.source_id,
            "step": s.step,
            "attempt": steps.attempt,
            "version": r.version,
        });
        args["metadata"] = post_metadata(args.get("metadata"), names);
    }
    let answer = if s.method == RESPOND {
        match &r.response_url {
            Some(url) => r.slack.respond(url, &args, r.deadline).await,
            None => Err(SlackError::Api {
                code: "no_response_url".into(),
            }),
        }
    } else {
        r.slack.api(s.method, &Args::Json(args), r.deadline).await
    };
    steps.in_flight = None;
    answer
}

/// Records what the call came to: Slack's answer, kept for the claim's next write, or what
/// its refusal means.
async fn record(
    steps: &mut Steps,
    r: &For<'_>,
    s: Admitted<'_>,
    announcement: Announcement,
    answer: Result<Value, SlackError>,
) -> Result<Made, Error> {
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => match refused(steps, r, &s, announcement, error).await? {
            Refused::Already(answer) => answer,
            Refused::Settled(made) => return Ok(made),
        },
    };
    steps.tally.made += 1;
    let result = match s.returns {
        Returns::Ids => recordable(&answer),
        Returns::Nothing => "{}".to_string(),
    };
    steps.unrecorded.push(Settled::Done {
        step: s.step,
        result,
        op: Some(s.op),
    });
    Ok(Made::Answer(answer))
}

/// What a call Slack did not answer with `ok` comes to, when not an error.
enum Refused {
    /// Done already (or, never announced, its target gone): an answer recorded as made.
    Already(Value),
    /// Settled without a record of its own: the view found, or handed to the worker in doubt.
    Settled(Made),
}

/// What a failed call means: done already by a definite answer, or an error, kept in doubt
/// where it may have been made.
async fn refused(
    steps: &mut Steps,
    r: &For<'_>,
    s: &Admitted<'_>,
    announcement: Announcement,
    error: SlackError,
) -> Result<Refused, Error> {
    let (step, method) = (s.step, s.method);
    match error {
        SlackError::Api { code } if s.trigger_bound && code == "exchanged_trigger_id" => {
            spent_trigger(steps, r, s, announcement, code).await
        }
        SlackError::Api { code } if s.benign.contains(&code.as_str()) => {
            Ok(Refused::Already(json!({"ok": true, "already": code})))
        }
        e if e.code().is_some_and(|c| s.benign_if_announced.contains(&c)) => {
            let code = e.code().unwrap_or_default().to_string();
            // A definite answer either way, recorded so that every run takes the same path:
            // made already by the earlier call that was announced, or (never announced) the
            // call found its target gone.
            if s.announced {
                tracing::info!(
                    step,
                    method,
                    code,
                    "an announced call answered as made already: the earlier call's own"
                );
                Ok(Refused::Already(json!({"ok": true, "already": code})))
            } else {
                Ok(Refused::Already(
                    json!({"ok": true, "already": format!("{UNANNOUNCED}{code}")}),
                ))
            }
        }
        error => {
            if error.may_have_posted() {
                steps.doubtful = true;
                if announcement.stands || steps.provisional {
                    // No intent of its own in the ledger: the finish (or the hand-off) records
                    // one.
                    steps.unrecorded.push(Settled::Unknown {
                        step,
                        intent: announcement.intent,
                    });
                }
                if steps.provisional && s.trigger_bound {
                    // Deferred mode's ingress: the hand-off goes on; the worker looks for the
                    // view rather than opening another with an expired trigger.
                    tracing::warn!(
                        step,
                        method,
                        "no answer to the view's call before the hand-off: the worker looks for it"
                    );
                    return Ok(Refused::Settled(Made::HandOff));
                }
            } else if s.earlier.is_none() && !announcement.stands {
                // Certainly not made, and no earlier claim tried: no one need look.
                steps.unrecorded.push(Settled::NotDone { step });
            }
            Err(Error::Slack(error))
        }
    }
}

/// A view's trigger spent already (`exchanged_trigger_id`): an earlier run opened it and its
/// answer was lost. The view is found by its external_id, and its id recorded.
async fn spent_trigger(
    steps: &mut Steps,
    r: &For<'_>,
    s: &Admitted<'_>,
    announcement: Announcement,
    code: String,
) -> Result<Refused, Error> {
    let (step, method) = (s.step, s.method);
    match look_for_view(r, step, &s.args).await {
        (Shows::Found, Seen::Taken(answer)) => {
            tracing::info!(step, method, "the trigger opened a view already: found it");
            Ok(Refused::Settled(Made::Answer(
                steps.settled_earlier(step, &s.op, answer),
            )))
        }
        (_, Seen::Failed(error)) => {
            // Opened, its id unknown, and Slack cannot be asked now: held, in doubt.
            if announcement.stands || steps.provisional {
                steps.unrecorded.push(Settled::Unknown {
                    step,
                    intent: announcement.intent,
                });
            }
            if steps.provisional {
                // Deferred mode's ingress: handed on in doubt; the worker looks.
                tracing::warn!(
                    step,
                    method,
                    "the trigger opened a view already, and Slack cannot show it now: \
                     the worker looks for it"
                );
                return Ok(Refused::Settled(Made::HandOff));
            }
            steps.held = true;
            Err(Error::LookupUnavailable(error))
        }
        // Spent, and no view of ours under its external_id (closed since, or opened
        // by a version that gave it none): nothing to open again.
        _ => Ok(Refused::Already(json!({"ok": true, "already": code}))),
    }
}

/// Looks for the view an earlier run opened (or pushed) as step `step`, by the `external_id`
/// in `args`: `views.update` with the same view answers it (and its id), or `not_found`.
async fn look_for_view(r: &For<'_>, step: u32, args: &Value) -> (Shows, Seen) {
    let view = &args["view"];
    let update = json!({"external_id": view["external_id"], "view": view});
    match r
        .slack
        .api("views.update", &Args::Json(update), r.deadline)
        .await
    {
        Ok(answer) => {
            tracing::info!(step, "an earlier run's view is open: not opened again");
            let id = answer["view"]["id"].clone();
            (
                Shows::Found,
                Seen::Taken(json!({"ok": true, "view": {"id": id}})),
            )
        }
        Err(SlackError::Api { code }) if code == "not_found" => (Shows::Absent, Seen::Nothing),
        Err(error) => {
            tracing::warn!(
                error = %crate::errors::error_chain(&error),
                step,
                "could not look for an earlier run's view: releasing"
            );
            (Shows::Unavailable, Seen::Failed(error))
        }
    }
}

/// Looks in Slack for the write an earlier claim announced as step `step` (`earlier`): what
/// Slack shows, with the answer to take (the message's ids), or the look-up's error.
async fn look(
    steps: &mut Steps,
    r: &For<'_>,
    step: u32,
    earlier: &StepRecord,
    settle: Settle<'_>,
) -> (Shows, Seen) {
    let (earlier_attempt, at_ms, lease_until_ms, looked) = match earlier {
        StepRecord::Intent {
            attempt,
            at_ms,
            lease_until_ms,
            looked,
            ..
        } => (Some(*attempt), *at_ms, *lease_until_ms, looked),
        StepRecord::Began {
            at_ms,
            lease_until_ms,
            looked,
            ..
        } => (None, Some(*at_ms), Some(*lease_until_ms), looked),
        StepRecord::Done { .. } => unreachable!("a done step is replayed, not looked for"),
    };
    let (channel, thread_ts, adopt_unmarked) = match settle {
        Settle::Lookup { channel, thread_ts } => (channel, thread_ts, false),
        Settle::Stream { channel, thread_ts } => (channel, Some(thread_ts), true),
        _ => unreachable!("only looked-for steps are looked for"),
    };
    // The earlier claim posted after its intent and before its lease ended: only that window
    // is searched.
    let oldest = match at_ms {
        Some(at) => Some(slack_ts(at.saturating_sub(LOOKUP_SLACK_MS))),
        None => r.since_ts.clone(),
    };
    // Records of versions before times carry none: from the request on, without an end (a
    // later claim of such a version may have posted at any time).
    let latest = lease_until_ms.map(|until| slack_ts(until + LOOKUP_SLACK_MS));
    // A stream is adopted only when it is the one unmarked message of the whole window: its
    // look-up always reads the window whole.
    let window = (
        oldest.clone().unwrap_or_default(),
        latest.clone().unwrap_or_default(),
    );
    let resume = match (adopt_unmarked, looked) {
        (false, Some(l))
            if (l.oldest.as_str(), l.latest.as_str()) == (&window.0[..], &window.1[..]) =>
        {
            tracing::info!(
                step,
                from = l.to,
                "going on with an earlier look-up from where it stopped"
            );
            Some(l.to.clone())
        }
        _ => None,
    };
    let query = ReplyQuery {
        channel,
        thread_ts,
        oldest: oldest.as_deref(),
        latest: latest.as_deref(),
        key: steps.key.as_str(),
        step,
        app: r.app,
        adopt_unmarked,
        resume: resume.as_deref(),
    };
    let lookup = r.slack.find_reply(&query, r.deadline).await;
    if let (Err(_), Some(to), false) = (&lookup.result, &lookup.reached, adopt_unmarked) {
        // Cut short: the next claim goes on from here.
        steps.unrecorded.push(Settled::Looked {
            step,
            looked: Looked {
                oldest: window.0.clone(),
                latest: window.1.clone(),
                to: to.clone(),
            },
        });
    }
    match lookup.result {
        Ok(Some(found)) => {
            tracing::info!(
                step,
                ts = found.ts,
                earlier_attempt,
                "an earlier claim's message is already in Slack: not posting again"
            );
            let answer = json!({"ok": true, "channel": found.channel, "ts": found.ts});
            (Shows::Found, Seen::Taken(answer))
        }
        Ok(None) => (Shows::Absent, Seen::Nothing),
        Err(error) if error.code().is_some_and(|c| UNLOOKABLE.contains(&c)) => {
            // The bot is not in the conversation, or the app lacks the scope (a command in a DM
            // between people, a DM `conversations.open` may not open): no later delivery
            // could look either.
            tracing::warn!(
                error = %crate::errors::error_chain(&error),
                step,
                "an earlier claim may have made this write, and Slack refuses to show the \
                 conversation"
            );
            (Shows::RefusedForGood, Seen::Failed(error))
        }
        Err(error) => {
            tracing::warn!(
                error = %crate::errors::error_chain(&error),
                step,
                last_chance = steps.last_chance,
                "could not look for an earlier claim's message: releasing, so that a later \
                 delivery looks again (none writes without looking)"
            );
            (Shows::Unavailable, Seen::Failed(error))
        }
    }
}

tokio::task_local! {
    /// The step of the `remember` whose computation is being polled: set only while it is
    /// (a `remember` made at the same time beside it, by `join!`, is not inside it).
    static REMEMBERING: u32;
}

/// The step of the remembered computation this code runs inside, if any.
pub(crate) fn inside_remember() -> Option<u32> {
    REMEMBERING.try_with(|step| *step).ok()
}

/// Runs `compute` once per request and remembers its result in the journal, written before
/// this returns: a later run of the listener gets the remembered value without computing it
/// again. It is a step like a write (`name` the same, at the same place, each run); a result
/// larger than [`MAX_REMEMBERED_BYTES`] serialised is not remembered (a later run computes it
/// again). See [`crate::app::Ctx::remember`].
pub(crate) async fn remember<T, F>(
    held: &Mutex<Steps>,
    deadline: Instant,
    name: &str,
    compute: F,
) -> Result<T, Error>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
    F: std::future::Future<Output = T>,
{
    let mut steps = held.lock().await;
    if steps.closed {
        return Err(Error::Closed);
    }
    if let Some(outer) = inside_remember() {
        // Inside another remembered computation (polled from within it): part of its result,
        // which is remembered (or not) whole. No step of its own (a run that finds the outer
        // remembered never gets here), and writes inside stay refused until the outer ends.
        tracing::debug!(
            name,
            outer,
            "remember inside a remember: computed as part of it"
        );
        drop(steps);
        return Ok(compute.await);
    }
    let op = step_op("remember", name, "");
    let (step, earlier) = steps.take(&op)?;
    match &earlier {
        Some(StepRecord::Done { result, .. }) => {
            if let Ok(value) = serde_json::from_str::<T>(result) {
                tracing::info!(step, name, "remembered: not computed again");
                return Ok(value);
            }
            tracing::warn!(
                step,
                name,
                "a remembered result of another shape: computed again"
            );
        }
        // An earlier claim's window here wrote nothing to Slack: a remembered result is no
        // write.
        Some(StepRecord::Began { .. }) => steps.began_settled = true,
        _ => {}
    }
    // Computed without the steps held, so that a write inside is refused at once rather
    // than waiting: a remembered computation must not write (a replay would skip it).
    if let Some(hooks) = crate::hooks::installed() {
        hooks.computing(steps.key.as_str(), step, name);
    }
    drop(steps);
    let value = REMEMBERING.scope(step, compute).await;
    let mut steps = held.lock().await;
    if steps.held {
        // Held back: no ledger write of this claim may end the doubt it keeps.
        return Ok(value);
    }
    let result = serde_json::to_string(&value)
        .map_err(|e| Error::Slack(SlackError::InvalidResponse(Box::new(e))))?;
    if steps.provisional {
        // Deferred mode's ingress has no claim: the result goes to the worker with the
        // request (its journal is seeded with it).
        if result.len() <= MAX_REMEMBERED_BYTES {
            steps.unrecorded.push(Settled::Done {
                step,
                result,
                op: Some(op),
            });
        }
        return Ok(value);
    }
    let record = StepRecord::Done {
        result,
        op: Some(op),
    };
    let too_large = match &record {
        StepRecord::Done { result, .. } => result.len() > MAX_REMEMBERED_BYTES,
        _ => false,
    };
    if too_large || journal_bytes(&steps.after(step, &record)) > MAX_JOURNAL_BYTES {
        // Not a write to Slack: nothing is lost by not keeping it, but a later run
        // computes it again.
        tracing::warn!(
            step,
            name,
            limit = MAX_REMEMBERED_BYTES,
            journal_limit = MAX_JOURNAL_BYTES,
            "too large to remember: a later run computes it again"
        );
        return Ok(value);
    }
    steps.write(step, &record, deadline).await?;
    steps.journal.insert(step, record);
    Ok(value)
}
