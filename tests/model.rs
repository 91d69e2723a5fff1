//! The ledger protocol as a model, checked exhaustively with stateright: 2 instances, 3 (and
//! 4) deliveries of one event (the original and its retries), a crash possible at every step,
//! leases that expire, Slack calls that fail cleanly, ambiguously or for good, a ledger that can
//! fail or lose an answer, and a look-up in Slack that can be refused (rate limits, errors).
//!
//! The claim stands for the post's intent: it appends its began window, which the claimant's
//! next write (a release, a failure, the completion) ends, recording an intent where the post's
//! fate is unknown, and keeping earlier windows it did not settle as one. A second model checks
//! a message's alias (its `client_msg_id`), written beside the claim: two copies of one message
//! under two `ts` are answered once.
//!
//! The claim decision is the library's own rule (`ledger::existing_blocks_claim`). A claim of a
//! key that exists is two writes, as the DynamoDB ledger makes it: the put that finds the item,
//! then the update that takes it over.
//!
//! Assumptions (see RELIABILITY.md):
//! - instance clocks agree within the lease margin: no one sees a lease expire while its
//!   claimant is still working (processing stops before the lease ends);
//! - a Slack post is atomic and, once made, visible to conversations.replies / .history with its
//!   metadata whenever Slack answers the look-up;
//! - Slack's retries after the first come after every lease has ended (a Lambda timeout under
//!   Slack's one-minute retry); the first retry may overlap the original;
//! - a conditional write to one DynamoDB item is atomic.

use slack_once::ledger::{Blocked, Status, existing_blocks_claim};
use stateright::{Checker, Model, Property};

const INSTANCES: usize = 2;

/// Time in the model: leases are live at `LIVE`, expired at `NOW`.
const NOW: u64 = 1_000_000;
const LIVE: u64 = NOW + 1;
const TTL_S: u64 = NOW / 1000 + 90_000;

type Token = (usize, u8);

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Item {
    status: Status,
    owner: Token,
    lease_live: bool,
    attempts: u8,
    /// The journal's record of the reply (step 1): a claim may have posted it.
    intent: bool,
    /// The began windows: claims that have written nothing since they claimed (each may have
    /// posted, its claim standing for the intent).
    began: Vec<Token>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Phase {
    Idle,
    /// Holds delivery `d`, about to claim.
    Received {
        d: u8,
    },
    /// The claim's put found the item, and it counts as absent (released, its lease ended): the
    /// update that takes it over comes next, a write of its own (anything may happen between).
    TakingOver {
        d: u8,
    },
    /// The claim was applied but its answer lost: the SDK sends the same write again.
    ClaimSentAgain {
        d: u8,
        token: Token,
    },
    /// Holds a claim; `earlier` says an earlier claim may have posted (an intent, or a began
    /// window of another claim).
    Claimed {
        d: u8,
        token: Token,
        earlier: bool,
    },
    /// The intent is recorded: about to post. `blind`: after a look-up that failed.
    Posting {
        token: Token,
        earlier_intent: bool,
        blind: bool,
    },
    /// The reply is in Slack (posted now, or found from an earlier claim): about to complete.
    Replied {
        token: Token,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    item: Option<Item>,
    phases: [Phase; INSTANCES],
    claims_made: [u8; INSTANCES],
    /// Deliveries Slack has sent, and those not yet received by an instance.
    sent: u8,
    in_flight: Vec<u8>,
    /// Slack got a 2xx: it stops redelivering.
    acked: bool,
    replies: u8,
    /// Posts made on the last delivery after a look-up that could not be made.
    blind_posts: u8,
    /// The event ended `failed` (Slack refused the reply for good).
    failed: bool,
    /// A look-up could not be made and the claim was released for a later delivery.
    held_back: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    /// Slack sends the next delivery (retry 1 at once; later retries after every lease ended).
    Deliver,
    Receive(usize, u8),
    Claim(usize),
    /// The claim is applied, its answer lost: the SDK will send it again.
    ClaimAnswerLost(usize),
    /// The ledger is unreachable: 503.
    ClaimUnavailable(usize),
    /// Takeover, the journal holding the reply's intent: Slack is asked.
    LookupFound(usize),
    LookupNotFound(usize),
    /// Rate-limited or refused: release and answer non-2xx, unless no delivery follows.
    LookupFailed(usize),
    /// The post, its intent the claim: no write before it.
    Post(usize),
    PostOk(usize),
    /// The post failed and did not happen; release; 502.
    PostFailed(usize),
    /// The post happened but the answer says otherwise (internal_error, lost answer); release; 502.
    PostAmbiguous(usize),
    /// As PostFailed, but the release does not reach the ledger: the lease stays until it ends.
    PostFailedReleaseLost(usize),
    /// Slack refused for good (channel_not_found…): nothing posted, marked failed, 200.
    PostPermanent(usize),
    Complete(usize),
    /// The post is out but completion fails: answered 2xx all the same.
    CompleteLost(usize),
    /// SIGKILL: local state gone, no answer to Slack.
    Crash(usize),
    /// Time passes: a lease whose owner is no longer working on it ends.
    LeaseEnds,
}

struct Protocol {
    /// Deliveries of the event: the original and its retries (Slack sends at most 4).
    deliveries: u8,
    /// The fixed protocol: a failed look-up holds the post back while a delivery remains.
    /// `false` models the old one: post anyway.
    hold_back_without_lookup: bool,
    /// The last delivery posts after a failed look-up (an earlier protocol's "blind post on the
    /// last delivery"). `false`, today's: it holds the claim too, and the event ends counted as
    /// failed rather than answered twice.
    blind_on_last: bool,
    /// Whether a takeover looks in Slack at all before posting.
    search_slack: bool,
    /// A claim that ends without settling the earlier claims' began windows keeps them as an
    /// intent. `false` models a release that simply ends every window.
    keep_unsettled_windows: bool,
    /// The claim is a put conditioned on the key's absence, then, where the item it finds
    /// counts as absent, an update with the full rule: two writes. `false`: one update.
    put_first: bool,
}

impl Protocol {
    fn fixed(deliveries: u8) -> Self {
        Self {
            deliveries,
            hold_back_without_lookup: true,
            blind_on_last: false,
            search_slack: true,
            keep_unsettled_windows: true,
            put_first: true,
        }
    }

    fn working(state: &State, token: Token) -> bool {
        matches!(&state.phases[token.0],
            Phase::ClaimSentAgain { token: t, .. }
            | Phase::Claimed { token: t, .. }
            | Phase::Posting { token: t, .. }
            | Phase::Replied { token: t } if *t == token)
    }

    fn all_quiet(state: &State) -> bool {
        state.in_flight.is_empty() && state.phases.iter().all(|p| *p == Phase::Idle)
    }

    fn last(&self, d: u8) -> bool {
        d + 1 == self.deliveries
    }

    /// The claim rule, with this request's own claim recognised (it sees the earlier began
    /// windows, not its own).
    fn claim(&self, s: &mut State, i: usize, d: u8, own: Option<Token>, update: bool) {
        if let (Some(item), Some(own)) = (&s.item, own)
            && item.owner == own
            && item.status == Status::InProgress
        {
            s.phases[i] = Phase::Claimed {
                d,
                token: own,
                earlier: item.intent || item.began.iter().any(|t| *t != own),
            };
            return;
        }
        let found = s.item.as_ref().and_then(|item| {
            let lease_until = if item.lease_live { LIVE } else { NOW };
            existing_blocks_claim(item.status, lease_until, TTL_S, NOW, false)
        });
        match found {
            Some(Blocked::Done) | Some(Blocked::Failed) => {
                s.acked = true; // 200 duplicate / already failed
                s.phases[i] = Phase::Idle;
            }
            Some(Blocked::InProgress { .. }) => s.phases[i] = Phase::Idle, // 409
            // The put failed on an item that counts as absent: it wrote nothing.
            None if self.put_first && !update && s.item.is_some() => {
                s.phases[i] = Phase::TakingOver { d };
            }
            None => {
                let token = own.unwrap_or_else(|| {
                    s.claims_made[i] += 1;
                    (i, s.claims_made[i])
                });
                let (attempts, intent, mut began) =
                    s.item.as_ref().map_or((0, false, Vec::new()), |it| {
                        (it.attempts, it.intent, it.began.clone())
                    });
                let earlier = intent || !began.is_empty();
                began.push(token);
                s.item = Some(Item {
                    status: Status::InProgress,
                    owner: token,
                    lease_live: true,
                    attempts: attempts + 1,
                    intent,
                    began,
                });
                s.phases[i] = Phase::Claimed { d, token, earlier };
            }
        }
    }

    /// The claimant's finishing write: the began windows end; `intent` becomes what the
    /// journal now says of the reply (`None`: unchanged).
    fn finish(s: &mut State, token: Token, to: Status, intent: Option<bool>) {
        if let Some(item) = &mut s.item
            && item.owner == token
            && item.status == Status::InProgress
        {
            item.status = to;
            item.lease_live = false;
            item.began.clear();
            if let Some(intent) = intent {
                item.intent = intent;
            }
        }
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            item: None,
            phases: [Phase::Idle, Phase::Idle],
            claims_made: [0; INSTANCES],
            sent: 0,
            in_flight: vec![],
            acked: false,
            replies: 0,
            blind_posts: 0,
            failed: false,
            held_back: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if !s.acked && s.sent < self.deliveries {
            // The original and retry 1 at any time; later retries once every lease has ended
            // and nothing is in flight (Slack's one-minute wait outlasts every lease).
            let later_retry_ok =
                Self::all_quiet(s) && s.item.as_ref().is_none_or(|i| !i.lease_live);
            if s.sent < 2 || later_retry_ok {
                actions.push(Action::Deliver);
            }
        }
        if let Some(item) = &s.item
            && item.status == Status::InProgress
            && item.lease_live
            && !Self::working(s, item.owner)
        {
            actions.push(Action::LeaseEnds);
        }
        for i in 0..INSTANCES {
            match &s.phases[i] {
                Phase::Idle => {
                    for &d in &s.in_flight {
                        actions.push(Action::Receive(i, d));
                    }
                }
                Phase::Received { .. } | Phase::TakingOver { .. } => {
                    actions.push(Action::Claim(i));
                    actions.push(Action::ClaimAnswerLost(i));
                    actions.push(Action::ClaimUnavailable(i));
                    actions.push(Action::Crash(i));
                }
                Phase::ClaimSentAgain { .. } => {
                    actions.push(Action::Claim(i));
                    actions.push(Action::Crash(i));
                }
                Phase::Claimed { earlier, .. } => {
                    if *earlier && self.search_slack {
                        // Slack answers truthfully when it answers (assumption 4).
                        if s.replies > 0 {
                            actions.push(Action::LookupFound(i));
                        } else {
                            actions.push(Action::LookupNotFound(i));
                        }
                        actions.push(Action::LookupFailed(i));
                    } else {
                        actions.push(Action::Post(i));
                    }
                    actions.push(Action::Crash(i));
                }
                Phase::Posting { .. } => {
                    actions.push(Action::PostOk(i));
                    actions.push(Action::PostFailed(i));
                    actions.push(Action::PostAmbiguous(i));
                    actions.push(Action::PostFailedReleaseLost(i));
                    actions.push(Action::PostPermanent(i));
                    actions.push(Action::Crash(i));
                }
                Phase::Replied { .. } => {
                    actions.push(Action::Complete(i));
                    actions.push(Action::CompleteLost(i));
                    actions.push(Action::Crash(i));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Deliver => {
                s.in_flight.push(s.sent);
                s.sent += 1;
            }
            Action::Receive(i, d) => {
                s.in_flight.retain(|&x| x != d);
                s.phases[i] = Phase::Received { d };
            }
            Action::Claim(i) => match s.phases[i].clone() {
                Phase::Received { d } => self.claim(&mut s, i, d, None, false),
                Phase::TakingOver { d } => self.claim(&mut s, i, d, None, true),
                Phase::ClaimSentAgain { d, token } => self.claim(&mut s, i, d, Some(token), false),
                _ => return None,
            },
            Action::ClaimAnswerLost(i) => {
                let (d, update) = match s.phases[i] {
                    Phase::Received { d } => (d, false),
                    Phase::TakingOver { d } => (d, true),
                    _ => return None,
                };
                self.claim(&mut s, i, d, None, update);
                // Applied or not, the instance did not hear: it sends the same write again
                // (a put that found the item finds it again, as it is now).
                let token = (i, s.claims_made[i]);
                match s.phases[i] {
                    Phase::Claimed { .. } => s.phases[i] = Phase::ClaimSentAgain { d, token },
                    Phase::TakingOver { .. } => {}
                    _ if update => s.phases[i] = Phase::TakingOver { d },
                    _ => s.phases[i] = Phase::Received { d },
                }
            }
            Action::ClaimUnavailable(i) | Action::Crash(i) => s.phases[i] = Phase::Idle,
            Action::LookupFound(i) => {
                let Phase::Claimed { token, .. } = s.phases[i] else {
                    return None;
                };
                s.phases[i] = Phase::Replied { token };
            }
            Action::LookupNotFound(i) => {
                let Phase::Claimed { token, .. } = s.phases[i] else {
                    return None;
                };
                s.phases[i] = Phase::Posting {
                    token,
                    earlier_intent: true,
                    blind: false,
                };
            }
            Action::LookupFailed(i) => {
                let Phase::Claimed { d, token, .. } = s.phases[i] else {
                    return None;
                };
                if self.hold_back_without_lookup && !(self.blind_on_last && self.last(d)) {
                    // Release, the earlier claims' doubt kept as an intent; answer 503: a
                    // later delivery looks again.
                    let keep = self.keep_unsettled_windows.then_some(true);
                    Self::finish(&mut s, token, Status::Released, keep);
                    s.held_back = true;
                    s.phases[i] = Phase::Idle;
                } else {
                    // Blind: the old rule, or (before issue 36) the last delivery.
                    s.phases[i] = Phase::Posting {
                        token,
                        earlier_intent: true,
                        blind: self.last(d),
                    };
                }
            }
            Action::Post(i) => {
                let Phase::Claimed { token, earlier, .. } = s.phases[i] else {
                    return None;
                };
                s.phases[i] = Phase::Posting {
                    token,
                    earlier_intent: earlier,
                    blind: false,
                };
            }
            Action::PostOk(i) => {
                let Phase::Posting { token, blind, .. } = s.phases[i] else {
                    return None;
                };
                s.replies += 1;
                if blind {
                    s.blind_posts += 1;
                }
                s.phases[i] = Phase::Replied { token };
            }
            Action::PostFailed(i)
            | Action::PostAmbiguous(i)
            | Action::PostFailedReleaseLost(i)
            | Action::PostPermanent(i) => {
                let Phase::Posting {
                    token,
                    earlier_intent,
                    blind,
                } = s.phases[i]
                else {
                    return None;
                };
                // An earlier claim's recorded intent stays (its fate was settled by the look-up,
                // which found nothing; a later claim may look again).
                let kept = if earlier_intent { None } else { Some(false) };
                match action {
                    Action::PostAmbiguous(_) => {
                        s.replies += 1;
                        if blind {
                            s.blind_posts += 1;
                        }
                        // Its fate unknown: the release records its intent, whoever comes next
                        // looks.
                        Self::finish(&mut s, token, Status::Released, Some(true));
                    }
                    // Certainly not posted: the claim's window ends with the release.
                    Action::PostFailed(_) => Self::finish(&mut s, token, Status::Released, kept),
                    Action::PostPermanent(_) => {
                        Self::finish(&mut s, token, Status::Failed, kept);
                        s.failed = true;
                        s.acked = true; // 200 failed
                    }
                    _ => {} // the release is lost: the windows stay
                }
                s.phases[i] = Phase::Idle;
            }
            Action::Complete(i) | Action::CompleteLost(i) => {
                let Phase::Replied { token } = s.phases[i] else {
                    return None;
                };
                if matches!(action, Action::Complete(_)) {
                    Self::finish(&mut s, token, Status::Done, None);
                }
                s.acked = true; // 200 answered, even when completion failed
                s.phases[i] = Phase::Idle;
            }
            Action::LeaseEnds => {
                if let Some(item) = &mut s.item {
                    item.lease_live = false;
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("never two replies while a retry remains", |_, s: &State| {
                s.replies.saturating_sub(s.blind_posts) <= 1
            }),
            Property::always(
                "never two replies, not even on the last delivery",
                |model: &Protocol, s: &State| s.replies <= 1 || !model.hold_back_without_lookup,
            ),
            Property::always(
                "a blind post only doubles the last delivery's",
                |_, s: &State| s.blind_posts <= 1,
            ),
            Property::always("done only after a reply", |_, s: &State| {
                s.item.as_ref().is_none_or(|i| i.status != Status::Done) || s.replies >= 1
            }),
            Property::always(
                "no 2xx without a reply, unless failed for good",
                |_, s: &State| !s.acked || s.replies >= 1 || s.failed,
            ),
            Property::always(
                "no loss while a retry remains",
                |model: &Protocol, s: &State| {
                    // A state with nothing left to do: Slack got its 2xx, or used every retry.
                    let mut next = Vec::new();
                    model.actions(s, &mut next);
                    !next.is_empty() || s.acked || s.sent == model.deliveries
                },
            ),
            Property::sometimes("an answer is possible", |_, s: &State| {
                s.acked && s.replies == 1
            }),
            Property::sometimes("a takeover happens", |_, s: &State| {
                s.item.as_ref().is_some_and(|i| i.attempts > 1)
            }),
            Property::sometimes(
                "a refused look-up is held back, and a later delivery answers once",
                |_, s: &State| s.held_back && s.acked && s.replies == 1,
            ),
            Property::sometimes(
                "a lost claim answer is recognised as its own",
                |_, s: &State| {
                    s.acked
                        && s.replies == 1
                        && s.item.as_ref().is_some_and(|i| i.attempts == 1)
                        && s.claims_made.iter().sum::<u8>() == 1
                },
            ),
        ]
    }
}

#[test]
fn the_protocol_never_answers_twice_while_a_retry_remains_and_loses_nothing() {
    // 3 deliveries, and 4: Slack's real maximum (the original and 3 retries).
    for deliveries in [3, 4] {
        let checker = Protocol::fixed(deliveries).checker().spawn_bfs().join();
        println!(
            "model, {INSTANCES} instances, {deliveries} deliveries: {} states ({} unique), exhaustive",
            checker.state_count(),
            checker.unique_state_count()
        );
        checker.assert_properties();
        assert!(checker.is_done());
    }
}

#[test]
fn the_claim_as_one_update_holds_the_same_properties() {
    // Before the put came first, a claim was one update: the same properties hold.
    let checker = Protocol {
        put_first: false,
        ..Protocol::fixed(3)
    }
    .checker()
    .spawn_bfs()
    .join();
    println!(
        "model, the claim as one update, 3 deliveries: {} states ({} unique), exhaustive",
        checker.state_count(),
        checker.unique_state_count()
    );
    checker.assert_properties();
}

#[test]
fn a_blind_post_on_the_last_delivery_after_a_failed_look_up_is_found_to_answer_twice() {
    // Before issue 36 the last delivery posted after a failed look-up (a second reply then
    // counted as "only the last delivery's"); today's protocol holds the claim there too, and
    // never answers twice (the property the fixed protocol holds above).
    let checker = Protocol {
        blind_on_last: true,
        ..Protocol::fixed(3)
    }
    .checker()
    .spawn_bfs()
    .join();
    let path = checker
        .discovery("never two replies, not even on the last delivery")
        .expect("a counterexample exists with the blind post");
    println!("counterexample: {:?}", path.into_actions());
    assert!(
        checker
            .discovery("never two replies while a retry remains")
            .is_none()
    );
}

#[test]
fn posting_when_the_look_up_fails_is_found_to_answer_twice_while_a_retry_remains() {
    // The old rule (post anyway when Slack cannot be asked): the checker finds the double.
    let checker = Protocol {
        hold_back_without_lookup: false,
        ..Protocol::fixed(3)
    }
    .checker()
    .spawn_bfs()
    .join();
    let path = checker
        .discovery("never two replies while a retry remains")
        .expect("a counterexample exists");
    println!("counterexample: {:?}", path.into_actions());
}

#[test]
fn without_searching_slack_the_checker_finds_the_double_reply() {
    // The checker is not vacuous: drop the takeover's search and it finds a second answer
    // (a post that went through ambiguously, or a crash between post and completion).
    let checker = Protocol {
        search_slack: false,
        ..Protocol::fixed(3)
    }
    .checker()
    .spawn_bfs()
    .join();
    let path = checker
        .discovery("never two replies while a retry remains")
        .expect("a counterexample exists without the search");
    println!("counterexample: {:?}", path.into_actions());
    assert!(checker.discovery("no loss while a retry remains").is_none());
}

#[test]
fn a_release_that_ends_the_earlier_claims_unsettled_windows_is_found_to_answer_twice() {
    // A claim crashed during its post; the takeover cannot look and releases: had the release
    // simply ended every began window, the next delivery would post without looking.
    let checker = Protocol {
        keep_unsettled_windows: false,
        ..Protocol::fixed(4)
    }
    .checker()
    .spawn_bfs()
    .join();
    let path = checker
        .discovery("never two replies while a retry remains")
        .expect("a counterexample exists");
    println!("counterexample: {:?}", path.into_actions());
}

// ---------------------------------------------------------------- a message's alias

/// Two copies of one client message under two `ts` (the same `client_msg_id`, as Slack has
/// sent for one user gesture), each delivered twice, to 2 instances. Each delivery writes its
/// message's claim and the alias (`cmid-…` → the message) in either order, then decides:
/// claimed and the alias its own → post and complete; the alias another message's → a copy,
/// finished done without a post. Crashes anywhere, leases that end. Posts are found by a
/// takeover (the look-up of the first model), so this model isolates the alias.
mod alias {
    use stateright::{Model, Property};

    const MESSAGES: usize = 2;
    const INSTANCES: usize = 2;
    const DELIVERIES: u8 = 2;

    type Token = (usize, u8);

    #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
    pub enum Claimed {
        Acquired,
        Blocked,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    pub struct Primary {
        done: bool,
        owner: Token,
        lease_live: bool,
        /// Its post is in Slack (a takeover finds it).
        posted: bool,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    pub enum Phase {
        Idle,
        /// Holding delivery of message `m`; the claim's and the alias's writes, once each.
        Claiming {
            m: usize,
            token: Token,
            claim: Option<Claimed>,
            alias_ours: Option<bool>,
        },
        Posting {
            m: usize,
            token: Token,
        },
        Replied {
            m: usize,
            token: Token,
        },
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    pub struct State {
        primaries: [Option<Primary>; MESSAGES],
        alias: Option<usize>,
        phases: [Phase; INSTANCES],
        tokens: [u8; INSTANCES],
        sent: [u8; MESSAGES],
        in_flight: Vec<usize>,
        acked: [bool; MESSAGES],
        replies: u8,
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Action {
        Deliver(usize),
        Receive(usize, usize),
        WriteClaim(usize),
        WriteAlias(usize),
        Decide(usize),
        PostOk(usize),
        Complete(usize),
        Crash(usize),
        LeaseEnds(usize),
    }

    /// `check_alias: false` models a claim that ignores the alias (no `client_msg_id` claim).
    pub struct Aliases {
        pub check_alias: bool,
    }

    fn working(s: &State, m: usize, token: Token) -> bool {
        s.phases.iter().any(|p| match p {
            Phase::Claiming {
                m: pm, token: t, ..
            }
            | Phase::Posting { m: pm, token: t }
            | Phase::Replied { m: pm, token: t } => *pm == m && *t == token,
            Phase::Idle => false,
        })
    }

    impl Model for Aliases {
        type State = State;
        type Action = Action;

        fn init_states(&self) -> Vec<State> {
            vec![State {
                primaries: [None, None],
                alias: None,
                phases: [Phase::Idle, Phase::Idle],
                tokens: [0; INSTANCES],
                sent: [0; MESSAGES],
                in_flight: vec![],
                acked: [false; MESSAGES],
                replies: 0,
            }]
        }

        fn actions(&self, s: &State, actions: &mut Vec<Action>) {
            for m in 0..MESSAGES {
                if !s.acked[m] && s.sent[m] < DELIVERIES {
                    actions.push(Action::Deliver(m));
                }
                if let Some(p) = &s.primaries[m]
                    && !p.done
                    && p.lease_live
                    && !working(s, m, p.owner)
                {
                    actions.push(Action::LeaseEnds(m));
                }
            }
            for i in 0..INSTANCES {
                match &s.phases[i] {
                    Phase::Idle => {
                        for &m in &s.in_flight {
                            actions.push(Action::Receive(i, m));
                        }
                    }
                    Phase::Claiming {
                        claim, alias_ours, ..
                    } => {
                        if claim.is_none() {
                            actions.push(Action::WriteClaim(i));
                        }
                        if alias_ours.is_none() {
                            actions.push(Action::WriteAlias(i));
                        }
                        if claim.is_some() && alias_ours.is_some() {
                            actions.push(Action::Decide(i));
                        }
                        actions.push(Action::Crash(i));
                    }
                    Phase::Posting { .. } => {
                        actions.push(Action::PostOk(i));
                        actions.push(Action::Crash(i));
                    }
                    Phase::Replied { .. } => {
                        actions.push(Action::Complete(i));
                        actions.push(Action::Crash(i));
                    }
                }
            }
        }

        fn next_state(&self, last: &State, action: Action) -> Option<State> {
            let mut s = last.clone();
            match action {
                Action::Deliver(m) => {
                    s.in_flight.push(m);
                    s.sent[m] += 1;
                }
                Action::Receive(i, m) => {
                    let at = s.in_flight.iter().position(|&x| x == m)?;
                    s.in_flight.remove(at);
                    s.tokens[i] += 1;
                    s.phases[i] = Phase::Claiming {
                        m,
                        token: (i, s.tokens[i]),
                        claim: None,
                        alias_ours: None,
                    };
                }
                Action::WriteClaim(i) => {
                    let Phase::Claiming {
                        m, token, claim, ..
                    } = &mut s.phases[i]
                    else {
                        return None;
                    };
                    let free = s.primaries[*m]
                        .as_ref()
                        .is_none_or(|p| !p.done && !p.lease_live);
                    *claim = Some(if free {
                        let posted = s.primaries[*m].as_ref().is_some_and(|p| p.posted);
                        s.primaries[*m] = Some(Primary {
                            done: false,
                            owner: *token,
                            lease_live: true,
                            posted,
                        });
                        Claimed::Acquired
                    } else {
                        Claimed::Blocked
                    });
                }
                Action::WriteAlias(i) => {
                    let Phase::Claiming { m, alias_ours, .. } = &mut s.phases[i] else {
                        return None;
                    };
                    // Written where absent or already this message's.
                    let ours = s.alias.is_none_or(|a| a == *m);
                    if ours {
                        s.alias = Some(*m);
                    }
                    *alias_ours = Some(ours);
                }
                Action::Decide(i) => {
                    let Phase::Claiming {
                        m,
                        token,
                        claim: Some(claim),
                        alias_ours: Some(ours),
                    } = s.phases[i].clone()
                    else {
                        return None;
                    };
                    let held = s.primaries[m].as_ref().is_some_and(|p| p.owner == token);
                    let ours = ours || !self.check_alias;
                    s.phases[i] = Phase::Idle;
                    match (claim, ours) {
                        (Claimed::Acquired, true) if held => {
                            let posted = s.primaries[m].as_ref().is_some_and(|p| p.posted);
                            s.phases[i] = if posted {
                                Phase::Replied { m, token }
                            } else {
                                Phase::Posting { m, token }
                            };
                        }
                        (Claimed::Acquired, false) if held => {
                            // A copy of the other message: finished done, 200 duplicate.
                            if let Some(p) = &mut s.primaries[m] {
                                p.done = true;
                                p.lease_live = false;
                            }
                            s.acked[m] = true;
                        }
                        _ => {
                            // Done already (200) or a live claim elsewhere (409).
                            if s.primaries[m].as_ref().is_some_and(|p| p.done) {
                                s.acked[m] = true;
                            }
                        }
                    }
                }
                Action::PostOk(i) => {
                    let Phase::Posting { m, token } = s.phases[i] else {
                        return None;
                    };
                    s.replies += 1;
                    if let Some(p) = &mut s.primaries[m] {
                        p.posted = true;
                    }
                    s.phases[i] = Phase::Replied { m, token };
                }
                Action::Complete(i) => {
                    let Phase::Replied { m, token } = s.phases[i] else {
                        return None;
                    };
                    if let Some(p) = &mut s.primaries[m]
                        && p.owner == token
                    {
                        p.done = true;
                        p.lease_live = false;
                    }
                    s.acked[m] = true;
                    s.phases[i] = Phase::Idle;
                }
                Action::Crash(i) => s.phases[i] = Phase::Idle,
                Action::LeaseEnds(m) => {
                    if let Some(p) = &mut s.primaries[m] {
                        p.lease_live = false;
                    }
                }
            }
            Some(s)
        }

        fn properties(&self) -> Vec<Property<Self>> {
            vec![
                Property::always("one client message, one answer", |_, s: &State| {
                    s.replies <= 1
                }),
                Property::always(
                    "no loss while the alias owner's delivery remains",
                    |model: &Aliases, s: &State| {
                        let mut next = Vec::new();
                        model.actions(s, &mut next);
                        let owner_exhausted = s.alias.is_some_and(|m| s.sent[m] == DELIVERIES);
                        !next.is_empty() || s.replies == 1 || owner_exhausted || s.alias.is_none()
                    },
                ),
                Property::sometimes("answered once, both copies acknowledged", |_, s: &State| {
                    s.replies == 1 && s.acked == [true, true]
                }),
                Property::sometimes("a copy finished as a duplicate", |_, s: &State| {
                    s.replies == 1
                        && s.alias.is_some_and(|owner| {
                            s.primaries[1 - owner]
                                .as_ref()
                                .is_some_and(|p| p.done && !p.posted)
                        })
                }),
            ]
        }
    }
}

#[test]
fn two_copies_of_one_client_message_under_two_ts_are_answered_once() {
    let checker = alias::Aliases { check_alias: true }
        .checker()
        .spawn_bfs()
        .join();
    println!(
        "alias model, 2 instances, 2 messages x 2 deliveries: {} states ({} unique), exhaustive",
        checker.state_count(),
        checker.unique_state_count()
    );
    checker.assert_properties();
    assert!(checker.is_done());
}

#[test]
fn without_the_alias_the_checker_finds_two_answers_to_one_client_message() {
    let checker = alias::Aliases { check_alias: false }
        .checker()
        .spawn_bfs()
        .join();
    let path = checker
        .discovery("one client message, one answer")
        .expect("a counterexample exists without the alias");
    println!("counterexample: {:?}", path.into_actions());
}
