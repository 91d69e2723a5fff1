//! The ledger protocol as a model, checked exhaustively with stateright: 2 instances, 3 (and
//! 4) deliveries of one event (the original and its retries), a crash possible at every step, leases
//! that expire, Slack calls that fail cleanly or ambiguously, a ledger that can fail.
//!
//! The claim decision is the library's own rule (`ledger::existing_blocks_claim`).
//!
//! Assumptions (see RELIABILITY.md):
//! - instance clocks agree within the lease margin: no one sees a lease expire while its
//!   claimant is still working (processing stops before the lease ends);
//! - a Slack post is atomic and, once made, visible to conversations.replies / .history with its
//!   metadata (the bot has the history scope of the conversation);
//! - Slack's retries after the first come after every lease has ended (a Lambda timeout under
//!   Slack's one-minute retry); the first retry may overlap the original;
//! - a conditional write to one DynamoDB item is atomic.

use slack_once::ledger::{existing_blocks_claim, Claim, Status};
use stateright::{Checker, Model, Property};

const INSTANCES: usize = 2;

/// Time in the model: leases are live at `LIVE`, expired at `NOW`.
const NOW: u64 = 1_000_000;
const LIVE: u64 = NOW + 1;
const TTL_S: u64 = NOW / 1000 + 90_000;

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Item {
    status: Status,
    /// (instance, claim number): a claim's owner token.
    owner: (usize, u8),
    lease_live: bool,
    attempts: u8,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Phase {
    Idle,
    /// Holds delivery `d`, about to claim.
    Received {
        d: u8,
    },
    /// Holds a claim: about to look in Slack (takeovers) and post.
    Claimed {
        token: (usize, u8),
        attempt: u8,
    },
    /// The reply is in Slack (posted now, or found from an earlier claim): about to complete.
    Replied {
        token: (usize, u8),
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
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    /// Slack sends the next delivery (retry 1 at once; later retries after every lease ended).
    Deliver,
    Receive(usize, u8),
    Claim(usize),
    /// The ledger is unreachable: 503.
    ClaimUnavailable(usize),
    /// Takeover: the earlier claim's reply is found in Slack.
    FoundEarlierReply(usize),
    PostOk(usize),
    /// The post failed and did not happen; release; 502.
    PostFailed(usize),
    /// The post happened but the answer says otherwise (internal_error, lost answer); release; 502.
    PostAmbiguous(usize),
    /// As PostFailed, but the release does not reach the ledger: the lease stays until it ends.
    PostFailedReleaseLost(usize),
    Complete(usize),
    /// The post is out but completion fails: answered 2xx all the same.
    CompleteLost(usize),
    /// SIGKILL: local state gone, no answer to Slack.
    Crash(usize),
    /// Time passes: a lease whose owner is no longer working on it ends.
    LeaseEnds,
}

struct Protocol {
    /// Whether a takeover looks in Slack for the earlier claim's reply before posting.
    search_slack: bool,
    /// Deliveries of the event: the original and its retries (Slack sends at most 4).
    deliveries: u8,
}

impl Protocol {
    fn working(state: &State, token: (usize, u8)) -> bool {
        matches!(&state.phases[token.0],
            Phase::Claimed { token: t, .. } | Phase::Replied { token: t } if *t == token)
    }

    fn all_quiet(state: &State) -> bool {
        state.in_flight.is_empty() && state.phases.iter().all(|p| *p == Phase::Idle)
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
                    actions.push(Action::ClaimUnavailable(i));
                    actions.push(Action::Crash(i));
                }
                Phase::Claimed { attempt, .. } => {
                    if self.search_slack && *attempt > 1 && s.replies > 0 {
                        actions.push(Action::FoundEarlierReply(i));
                    } else {
                        actions.push(Action::PostOk(i));
                        actions.push(Action::PostFailed(i));
                        actions.push(Action::PostAmbiguous(i));
                        actions.push(Action::PostFailedReleaseLost(i));
                    }
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
        let release = |s: &mut State, token: (usize, u8)| {
            if let Some(item) = &mut s.item {
                if item.owner == token && item.status == Status::InProgress {
                    item.status = Status::Released;
                    item.lease_live = false;
                }
            }
        };
        match action {
            Action::Deliver => {
                s.in_flight.push(s.sent);
                s.sent += 1;
            }
            Action::Receive(i, d) => {
                s.in_flight.retain(|&x| x != d);
                s.phases[i] = Phase::Received { d };
            }
            Action::Claim(i) => {
                let found = s.item.as_ref().and_then(|item| {
                    let lease_until = if item.lease_live { LIVE } else { NOW };
                    existing_blocks_claim(item.status, lease_until, TTL_S, NOW)
                });
                match found {
                    Some(Claim::AlreadyDone) => {
                        s.acked = true; // 200 duplicate
                        s.phases[i] = Phase::Idle;
                    }
                    Some(Claim::InProgress { .. }) => s.phases[i] = Phase::Idle, // 409
                    Some(Claim::Acquired { .. }) => unreachable!("a blocking entry never acquires"),
                    None => {
                        s.claims_made[i] += 1;
                        let token = (i, s.claims_made[i]);
                        let attempts = s.item.as_ref().map_or(0, |it| it.attempts) + 1;
                        s.item = Some(Item {
                            status: Status::InProgress,
                            owner: token,
                            lease_live: true,
                            attempts,
                        });
                        s.phases[i] = Phase::Claimed {
                            token,
                            attempt: attempts,
                        };
                    }
                }
            }
            Action::ClaimUnavailable(i) | Action::Crash(i) => s.phases[i] = Phase::Idle,
            Action::FoundEarlierReply(i) => {
                let Phase::Claimed { token, .. } = s.phases[i] else {
                    return None;
                };
                s.phases[i] = Phase::Replied { token };
            }
            Action::PostOk(i) => {
                let Phase::Claimed { token, .. } = s.phases[i] else {
                    return None;
                };
                s.replies += 1;
                s.phases[i] = Phase::Replied { token };
            }
            Action::PostFailed(i) | Action::PostAmbiguous(i) | Action::PostFailedReleaseLost(i) => {
                let Phase::Claimed { token, .. } = s.phases[i] else {
                    return None;
                };
                if matches!(action, Action::PostAmbiguous(_)) {
                    s.replies += 1;
                }
                if !matches!(action, Action::PostFailedReleaseLost(_)) {
                    release(&mut s, token);
                }
                s.phases[i] = Phase::Idle; // 502
            }
            Action::Complete(i) | Action::CompleteLost(i) => {
                let Phase::Replied { token } = s.phases[i] else {
                    return None;
                };
                if matches!(action, Action::Complete(_)) {
                    if let Some(item) = &mut s.item {
                        if item.owner == token && item.status == Status::InProgress {
                            item.status = Status::Done;
                        }
                    }
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
            Property::always("never two replies", |_, s: &State| s.replies <= 1),
            Property::always("done only after a reply", |_, s: &State| {
                s.item.as_ref().is_none_or(|i| i.status != Status::Done) || s.replies >= 1
            }),
            Property::always("no 2xx without a reply", |_, s: &State| {
                !s.acked || s.replies >= 1
            }),
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
        ]
    }
}

#[test]
fn the_protocol_never_answers_twice_and_loses_nothing_while_a_retry_remains() {
    // 3 deliveries as specified; 4 is Slack's real maximum (the original and 3 retries).
    for deliveries in [3, 4] {
        let checker = Protocol {
            search_slack: true,
            deliveries,
        }
        .checker()
        .spawn_bfs()
        .join();
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
fn without_searching_slack_the_checker_finds_the_double_reply() {
    // The checker is not vacuous: drop the takeover's search and it finds a second answer
    // (a post that went through ambiguously, or a crash between post and completion).
    let checker = Protocol {
        search_slack: false,
        deliveries: 3,
    }
    .checker()
    .spawn_bfs()
    .join();
    let path = checker
        .discovery("never two replies")
        .expect("a counterexample exists without the search");
    println!("counterexample: {:?}", path.into_actions());
    assert!(checker.discovery("no loss while a retry remains").is_none());
}
