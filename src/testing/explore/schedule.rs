//! A schedule: which story the request lives (how its copies and retries arrive), and where
//! which fault strikes. Faults are placed by *site*: the n-th call a run makes to the ledger,
//! to Slack or to the queue, counted from 1 in the order the run makes them.

use std::collections::BTreeMap;
use std::fmt;

/// What kind of call a site is: which faults it can meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteKind {
    /// A ledger call (claim, alias, step, finish, note).
    Ledger,
    /// A Slack Web API call that writes.
    SlackWrite,
    /// A Slack Web API call that only reads (a look-up, `users.info`, `conversations.open`).
    SlackRead,
    /// A post to a `response_url`.
    ResponseUrl,
    /// The ingress's send to the work queue.
    QueueSend,
}

/// A fault at one site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// The process dies before the call is sent.
    DiesBefore,
    /// The call takes effect, and the process dies before its answer arrives.
    DiesAfter,
    /// The call takes effect and its answer is lost (a connection reset, a ledger timeout):
    /// the process goes on, not knowing.
    AnswerLost,
    /// The ledger's SDK sends the call again after losing its answer: it takes effect twice,
    /// and the second answer is the one returned.
    SdkRetry,
    /// Refused without effect: the ledger throttles, Slack answers HTTP 503, the queue errs.
    Unavailable,
    /// No answer until after the deadline, without effect.
    Slow,
    /// Takes effect, but no answer until after the deadline.
    SlowApplied,
    /// Slack answers 429 with `Retry-After` (a look-up: 60 s, Slack's 2025 history limit).
    RateLimited,
    /// Slack answers `ok:false` `internal_error` having taken effect (Slack says such posts
    /// may have succeeded).
    InternalError,
    /// Refused for good: a look-up `missing_scope`, a write `restricted_action`, a
    /// `response_url` `expired_url`.
    Refused,
}

impl Fault {
    /// Every fault, in the order the explorer tries them.
    pub const ALL: [Fault; 10] = [
        Fault::DiesBefore,
        Fault::DiesAfter,
        Fault::AnswerLost,
        Fault::SdkRetry,
        Fault::Unavailable,
        Fault::Slow,
        Fault::SlowApplied,
        Fault::RateLimited,
        Fault::InternalError,
        Fault::Refused,
    ];

    /// The faults a site of `kind` can meet.
    pub fn at(kind: SiteKind) -> &'static [Fault] {
        use Fault::*;
        match kind {
            SiteKind::Ledger => &[
                DiesBefore,
                DiesAfter,
                AnswerLost,
                SdkRetry,
                Unavailable,
                Slow,
            ],
            SiteKind::SlackWrite => &[
                DiesBefore,
                DiesAfter,
                AnswerLost,
                Unavailable,
                Slow,
                SlowApplied,
                RateLimited,
                InternalError,
                Refused,
            ],
            SiteKind::SlackRead => &[DiesBefore, Unavailable, Slow, RateLimited, Refused],
            SiteKind::ResponseUrl => &[
                DiesBefore,
                DiesAfter,
                AnswerLost,
                Unavailable,
                Slow,
                SlowApplied,
                RateLimited,
                Refused,
            ],
            SiteKind::QueueSend => &[DiesBefore, DiesAfter, AnswerLost, Unavailable, Slow],
        }
    }

    /// Whether the process dies or hangs here: what a takeover must recover from.
    pub fn is_crash(self) -> bool {
        matches!(
            self,
            Fault::DiesBefore | Fault::DiesAfter | Fault::AnswerLost | Fault::SlowApplied
        )
    }

    /// The fault's name in a schedule (`dies-after`, `rate-limited`…).
    pub fn name(self) -> &'static str {
        match self {
            Fault::DiesBefore => "dies-before",
            Fault::DiesAfter => "dies-after",
            Fault::AnswerLost => "answer-lost",
            Fault::SdkRetry => "sdk-retry",
            Fault::Unavailable => "unavailable",
            Fault::Slow => "slow",
            Fault::SlowApplied => "slow-applied",
            Fault::RateLimited => "rate-limited",
            Fault::InternalError => "internal-error",
            Fault::Refused => "refused",
        }
    }

    /// The fault a schedule names.
    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// What it means, for the trace.
    pub fn story(self) -> &'static str {
        match self {
            Fault::DiesBefore => "the process dies before sending it",
            Fault::DiesAfter => "it takes effect; the process dies before the answer arrives",
            Fault::AnswerLost => "it takes effect; its answer is lost",
            Fault::SdkRetry => "the SDK sends it twice",
            Fault::Unavailable => "refused, without effect",
            Fault::Slow => "no answer before the deadline, without effect",
            Fault::SlowApplied => "it takes effect; no answer before the deadline",
            Fault::RateLimited => "rate-limited (429 with Retry-After)",
            Fault::InternalError => "it takes effect; Slack answers internal_error",
            Fault::Refused => "refused for good",
        }
    }
}

/// The `site`-th call (from 1) of the `run`-th run (from 1: each delivery to an ingress, each
/// receive of a worker, in the order they start).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct At {
    /// The run (from 1, in the order runs start).
    pub run: u32,
    /// The call of that run (from 1).
    pub site: u32,
}

/// How the request's deliveries arrive, besides Slack's own retries and the queue's
/// redeliveries (which follow every failure as they do in production).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Story {
    /// Each copy as Slack sends it, one after another (a message's events a moment apart).
    Plain,
    /// Every copy at the same instant, to instances of their own: two instances at once.
    Together,
    /// The same request sent twice, the second 1 s after the first (a person's client, a
    /// proxy's repeat); for an event, Slack's copy as if the first answer was late.
    Repeated,
    /// The first delivery answered by the old version (a deploy under way), the rest by the
    /// new one.
    Deploy,
    /// Someone who captured the first delivery sends it again 61 s later, its signature still
    /// fresh, with `X-Slack-Retry-Num: 3` added (headers are not signed): it must not pass
    /// for Slack's last chance.
    Forged,
}

impl Story {
    /// Every story, in the order the explorer tries them.
    pub const ALL: [Story; 5] = [
        Story::Plain,
        Story::Together,
        Story::Repeated,
        Story::Deploy,
        Story::Forged,
    ];

    /// The story's name in a schedule (`plain`…).
    pub fn name(self) -> &'static str {
        match self {
            Story::Plain => "plain",
            Story::Together => "together",
            Story::Repeated => "repeated",
            Story::Deploy => "deploy",
            Story::Forged => "forged",
        }
    }

    /// The story a schedule names.
    pub fn parse(name: &str) -> Option<Story> {
        Story::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One schedule: a story and its faults.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// How the copies and retries of the request arrive.
    pub story: Story,
    /// The fault placed at each call, by run and call.
    pub faults: BTreeMap<At, Fault>,
}

impl Schedule {
    /// The plain story with no fault: the fault-free run.
    pub fn plain() -> Self {
        Self {
            story: Story::Plain,
            faults: BTreeMap::new(),
        }
    }

    /// The schedule as text, to give [`super::Explorer::replay`]: `story; run.site=fault …`.
    pub fn to_text(&self) -> String {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(at, f)| format!("{}.{}={}", at.run, at.site, f.name()))
            .collect();
        if faults.is_empty() {
            self.story.name().to_string()
        } else {
            format!("{}; {}", self.story.name(), faults.join(" "))
        }
    }

    /// Reads [`Schedule::to_text`].
    pub fn parse(text: &str) -> Result<Self, String> {
        let (story, faults) = text.split_once(';').unwrap_or((text, ""));
        let story = Story::parse(story.trim()).ok_or_else(|| {
            format!(
                "unknown story {:?} (plain, together, repeated, deploy, forged)",
                story.trim()
            )
        })?;
        let mut schedule = Schedule {
            story,
            faults: BTreeMap::new(),
        };
        for part in faults.split_whitespace() {
            let bad = || format!("{part:?} is not RUN.SITE=FAULT");
            let (at, fault) = part.split_once('=').ok_or_else(bad)?;
            let (run, site) = at.split_once('.').ok_or_else(bad)?;
            let at = At {
                run: run.parse().map_err(|_| bad())?,
                site: site.parse().map_err(|_| bad())?,
            };
            let fault = Fault::parse(fault).ok_or_else(|| format!("unknown fault {fault:?}"))?;
            schedule.faults.insert(at, fault);
        }
        Ok(schedule)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// A small, fast, seedable generator (SplitMix64): the same seed draws the same schedules.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 1.0 < p
    }
}

/// The soak's deliveries to an instance that is down, per million (`FaultRates::soak`).
const SOAK_DOWN: u32 = 15_000;

/// The chance of each fault at a call of each kind, per million calls.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRates {
    rates: Vec<(SiteKind, Fault, u32)>,
    /// Of deliveries, per million: to an instance that is down (killed, not started again).
    down: u32,
}

impl FaultRates {
    /// No faults.
    pub fn none() -> Self {
        Self {
            rates: Vec::new(),
            down: 0,
        }
    }

    /// Of deliveries to an ingress, per million: to an instance that is down (killed and not
    /// started again yet), the connection refused.
    pub fn down(&self) -> u32 {
        self.down
    }

    /// Sets the deliveries, per million, that reach an instance that is down.
    pub fn with_down(mut self, per_million: u32) -> Self {
        self.down = per_million;
        self
    }

    /// The soak's faults (tests/api/soak/: `slack_faults`, `proxy::DYNAMO_FAULTS`,
    /// `proxy::SQS_FAULTS`), as they reach slack-once, per million calls. The soak injects
    /// them on the wire, below the AWS SDK and the Slack client; the explorer's faults strike
    /// above them, where what the SDK and the client retry is already absorbed:
    /// - a Slack write answered 500 (15,000: unavailable), 429 with `Retry-After: 1` (15,000:
    ///   rate-limited, the same wait), `internal_error` though applied (8,000), never answered
    ///   (3,000: slow), applied and never answered (3,000: slow-applied); a `response_url` post
    ///   answered 500 (15,000);
    /// - a look-up answered `ok:false` `ratelimited` (5,000: rate-limited, which the client
    ///   cannot wait for); the soak's 429s with `Retry-After: 1` on look-ups (20,000) are
    ///   waited out within the deadline, and not drawn;
    /// - DynamoDB's answer lost after the write (5,000) and a 500 after it (3,000), each sent
    ///   again by the SDK: sdk-retry; a throttle, retried by the SDK (three in a row, one call
    ///   in eight million), and a slow answer (300 to 800 ms): not drawn, but for a call refused
    ///   or slow past its deadline under load (5 each, the soak's few `ledger_unavailable`);
    /// - the queue's send whose answer is lost (100: answer-lost; the soak's SDK sends it again
    ///   and the message is enqueued twice, which the explorer's queue does not model);
    /// - the soak's SIGKILL every 5 s of one of three processes, restarted 300 ms later: a
    ///   process killed before (120) or after (120) any call, and a delivery reaching an
    ///   instance that is down (15,000 per million deliveries: [`FaultRates::down`]).
    pub fn soak() -> Self {
        use Fault::*;
        let kills = [(DiesBefore, 120), (DiesAfter, 120)];
        let mut rates = Vec::new();
        let mut add = |kind: SiteKind, faults: &[(Fault, u32)]| {
            for (fault, per) in faults.iter().chain(&kills) {
                rates.push((kind, *fault, *per));
            }
        };
        add(
            SiteKind::SlackWrite,
            &[
                (Unavailable, 15_000),
                (RateLimited, 15_000),
                (InternalError, 8_000),
                (Slow, 3_000),
                (SlowApplied, 3_000),
            ],
        );
        add(SiteKind::ResponseUrl, &[(Unavailable, 15_000)]);
        add(SiteKind::SlackRead, &[(RateLimited, 5_000)]);
        add(
            SiteKind::Ledger,
            &[(SdkRetry, 8_000), (Unavailable, 5), (Slow, 5)],
        );
        add(SiteKind::QueueSend, &[(AnswerLost, 100)]);
        Self {
            rates,
            down: SOAK_DOWN,
        }
    }

    /// Every fault a call of its kind can meet, each with the same chance: `rate` (0 to 1) in
    /// all at each call.
    pub fn uniform(rate: f64) -> Self {
        let mut rates = Vec::new();
        for kind in [
            SiteKind::Ledger,
            SiteKind::SlackWrite,
            SiteKind::SlackRead,
            SiteKind::ResponseUrl,
            SiteKind::QueueSend,
        ] {
            let faults = Fault::at(kind);
            let each = (rate.clamp(0.0, 1.0) * 1_000_000.0 / faults.len() as f64).round() as u32;
            for fault in faults {
                rates.push((kind, *fault, each));
            }
        }
        Self { rates, down: 0 }
    }

    /// Sets the chance of `fault` at a call of `kind`, per million calls.
    pub fn with(mut self, kind: SiteKind, fault: Fault, per_million: u32) -> Self {
        self.rates.retain(|(k, f, _)| !(*k == kind && *f == fault));
        self.rates.push((kind, fault, per_million));
        self
    }

    /// The fault a call of `kind` meets, given a roll in `0..1_000_000`.
    pub(crate) fn draw(&self, kind: SiteKind, roll: u32) -> Option<Fault> {
        let mut below = 0;
        for (k, fault, per) in &self.rates {
            if *k == kind {
                below += per;
                if roll < below {
                    return Some(*fault);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_reads_back_from_its_text() {
        let mut s = Schedule::plain();
        s.story = Story::Together;
        s.faults.insert(At { run: 1, site: 3 }, Fault::DiesAfter);
        s.faults.insert(At { run: 2, site: 1 }, Fault::RateLimited);
        assert_eq!(s.to_text(), "together; 1.3=dies-after 2.1=rate-limited");
        assert_eq!(Schedule::parse(&s.to_text()), Ok(s));
        assert_eq!(Schedule::parse("plain"), Ok(Schedule::plain()));
        assert!(Schedule::parse("plain; 1.x=slow").is_err());
        assert!(Schedule::parse("sideways").is_err());
    }

    #[test]
    fn the_same_seed_draws_the_same_numbers() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let drawn: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        assert_eq!(drawn, (0..5).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(Rng::new(8).next_u64(), drawn[0]);
    }
}
