//! The ledger protocol as a model, checked exhaustively with stateright: 2 instances, 3 (and
//! 4) deliveries of one event (the original and its retries), a crash possible at every step,
//! leases that expire, Slack calls that fail cleanly, ambiguously or for good, a ledger that can
//! fail or lose an answer, and a look-up in Slack that can be refused (rate limits, errors).
//!
//! The claim decision is the library's own rule (`ledger::existing_blocks_claim`).
//!
//! Assumptions (see RELIABILITY.md):
//! - instance clocks agree within the lease margin: no one sees a lease expire while its
//!   claimant is still working (processing stops before the lease ends);
//! - a Slack post is atomic and, once made, visible to conversations.replies / .history with its
//!   metadata whenever Slack answers the look-up;
//! - Slack's retries after the first come after every lease has ended (a Lambda timeout under
//!   Slack's one-minute retry); the first retry may overlap the original;
//! - a conditional write to one DynamoDB item is atomic.

use slack_once::ledger::{existing_blocks_claim, Blocked, Status};
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
    /// The journal's record of the reply (step 1): a claim was about to post it.
    intent: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Phase {
    Idle,
    /// Holds delivery `d`, about to claim.
    Received {
        d: u8,
    },
    /// The claim was applied but its answer lost: the SDK sends the same write again.
    ClaimSentAgain {
        d: u8,
        token: Token,
    },
    /// Holds a claim; `intent` is what the journal said of the reply when claimed.
    Claimed {
        d: u8,
        token: Token,
        intent: bool,
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
    /// The intent write, conditioned on the owner.
    RecordIntent(usize),
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
    /// Whether a takeover looks in Slack at all before posting.
    search_slack: bool,
}

impl Protocol {
    fn fixed(deliveries: u8) -> Self {
        Self {
            deliveries,
            hold_back_without_lookup: true,
            search_slack: true,
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

    /// The claim rule, with this request's own claim recognised.
    fn claim(s: &mut State, i: usize, d: u8, own: Option<Token>) {
        if let (Some(item), Some(own)) = (&s.item, own) {
            if item.owner == own && item.status == Status::InProgress {
                s.phases[i] = Phase::Claimed {
                    d,
                    token: own,
                    intent: item.intent,
                };
                return;
            }
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
            None => {
                let token = own.unwrap_or_else(|| {
                    s.claims_made[i] += 1;
                    (i, s.claims_made[i])
                });
                let (attempts, intent) = s
                    .item
                    .as_ref()
                    .map_or((0, false), |it| (it.attempts, it.intent));
                s.item = Some(Item {
                    status: Status::InProgress,
                    owner: token,
                    lease_live: true,
                    attempts: attempts + 1,
                    intent,
                });
                s.phases[i] = Phase::Claimed { d, token, intent };
            }
        }
    }

    fn finish(s: &mut State, token: Token, to: Status, clear_intent: bool) {
        if let Some(item) = &mut s.item {
            if item.owner == token && item.status == Status::InProgress {
                item.status = to;
                item.lease_live = false;
                if clear_intent {
                    item.intent = false;
                }
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
        if let Some(item) = &s.item {
            if item.status == Status::InProgress && item.lease_live && !Self::working(s, item.owner)
            {
                actions.push(Action::LeaseEnds);
            }
        }
        for i in 0..INSTANCES {
            match &s.phases[i] {
                Phase::Idle => {
                    for &d in &s.in_flight {
                        actions.push(Action::Receive(i, d));
                    }
                }
                Phase::Received { .. } => {
                    actions.push(Action::Claim(i));
                    actions.push(Action::ClaimAnswerLost(i));
                    actions.push(Action::ClaimUnavailable(i));
                    actions.push(Action::Crash(i));
                }
                Phase::ClaimSentAgain { .. } => {
                    actions.push(Action::Claim(i));
                    actions.push(Action::Crash(i));
                }
                Phase::Claimed { intent, .. } => {
                    if *intent && self.search_slack {
                        // Slack answers truthfully when it answers (assumption 4).
                        if s.replies > 0 {
                            actions.push(Action::LookupFound(i));
                        } else {
                            actions.push(Action::LookupNotFound(i));
                        }
                        actions.push(Action::LookupFailed(i));
                    } else {
                        actions.push(Action::RecordIntent(i));
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
                Phase::Received { d } => Self::claim(&mut s, i, d, None),
                Phase::ClaimSentAgain { d, token } => Self::claim(&mut s, i, d, Some(token)),
                _ => return None,
            },
            Action::ClaimAnswerLost(i) => {
                let Phase::Received { d } = s.phases[i] else {
                    return None;
                };
                Self::claim(&mut s, i, d, None);
                // Applied or not, the instance did not hear: it sends the same write again.
                let token = (i, s.claims_made[i]);
                if let Phase::Claimed { .. } = s.phases[i] {
                    s.phases[i] = Phase::ClaimSentAgain { d, token };
                } else {
                    s.phases[i] = Phase::Received { d };
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
                Self::post_after_intent(&mut s, i, token, true, false);
            }
            Action::LookupFailed(i) => {
                let Phase::Claimed { d, token, .. } = s.phases[i] else {
                    return None;
                };
                if self.hold_back_without_lookup && !self.last(d) {
                    // Release, keeping the intent; answer 503: a later delivery looks again.
                    Self::finish(&mut s, token, Status::Released, false);
                    s.held_back = true;
                    s.phases[i] = Phase::Idle;
                } else {
                    // Allowed blind only on the last delivery.
                    Self::post_after_intent(&mut s, i, token, true, self.last(d));
                }
            }
            Action::RecordIntent(i) => {
                let Phase::Claimed { token, intent, .. } = s.phases[i] else {
                    return None;
                };
                Self::post_after_intent(&mut s, i, token, intent, false);
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
                match action {
                    Action::PostAmbiguous(_) => {
                        s.replies += 1;
                        if blind {
                            s.blind_posts += 1;
                        }
                        // The intent stays: whoever comes next looks.
                        Self::finish(&mut s, token, Status::Released, false);
                    }
                    // Certainly not posted: the intent goes, unless an earlier claim's was there.
                    Action::PostFailed(_) => {
                        Self::finish(&mut s, token, Status::Released, !earlier_intent)
                    }
                    Action::PostPermanent(_) => {
                        Self::finish(&mut s, token, Status::Failed, !earlier_intent);
                        s.failed = true;
                        s.acked = true; // 200 failed
                    }
                    _ => {} // the release is lost
                }
                s.phases[i] = Phase::Idle;
            }
            Action::Complete(i) | Action::CompleteLost(i) => {
                let Phase::Replied { token } = s.phases[i] else {
                    return None;
                };
                if matches!(action, Action::Complete(_)) {
                    Self::finish(&mut s, token, Status::Done, false);
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

impl Protocol {
    /// The intent write, conditioned on the owner, then the post: instance `i` goes on to
    /// post, or, refused (NotOwner) because the claim is no longer held, posts nothing.
    fn post_after_intent(s: &mut State, i: usize, token: Token, earlier_intent: bool, blind: bool) {
        s.phases[i] = match &mut s.item {
            Some(item) if item.owner == token && item.status == Status::InProgress => {
                item.intent = true;
                Phase::Posting {
                    token,
                    earlier_intent,
                    blind,
                }
            }
            _ => Phase::Idle,
        };
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
fn posting_when_the_look_up_fails_is_found_to_answer_twice_while_a_retry_remains() {
    // The old rule (post anyway when Slack cannot be asked): the checker finds the double.
    let checker = Protocol {
        deliveries: 3,
        hold_back_without_lookup: false,
        search_slack: true,
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
        deliveries: 3,
        hold_back_without_lookup: true,
        search_slack: false,
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
