//! The explorer with Slack delivering over Socket Mode (`Explorer::socket_mode`): each delivery
//! an envelope through the Socket Mode dispatch, acknowledged or not; an unacknowledged event
//! again after 3 s, at once, up to 3 times; commands and interactions never again; a delivery
//! to a ghost connection swallowed.

use super::*;

#[test]
fn over_socket_mode_the_reference_bot_answers_mentions_dms_its_command_and_button_once() {
    Explorer::new(slack_once::reference_app)
        .request(Request::mention("hello"))
        .request(Request::dm("hello"))
        .request(Request::command("/once", "hello"))
        .request(
            Request::click("once_thanks", "helpful")
                .on_message("<@U0USER> you said: “hello”. This is my one answer to it."),
        )
        .socket_mode()
        .both_modes()
        .run()
        .assert_ok();
}

#[test]
fn over_socket_mode_the_examples_answer_each_request_once() {
    Explorer::new(echo::app)
        .request(Request::mention("hello"))
        .socket_mode()
        .both_modes()
        .run()
        .assert_ok();
    Explorer::new(triage::app)
        .request(Request::message("time to ship it"))
        .socket_mode()
        .run()
        .assert_ok();
    Explorer::new(modal::app)
        .request(Request::shortcut("new_note"))
        .request(Request::view_submission(
            json!({"type": "modal", "callback_id": modal::CALLBACK,
                   "title": {"type": "plain_text", "text": "New note"}, "blocks": []}),
            json!({modal::TITLE_BLOCK: {modal::TITLE_INPUT: {"type": "plain_text_input", "value": "groceries"}}}),
        ))
        .socket_mode()
        .run()
        .assert_ok();
}

/// Slack's tries of an event all fall inside the lease of a claimant that died (3 s apart,
/// not a minute): a dispatch that lets a held event go, rather than keep it in hand until the
/// claim lapses, loses it while Slack still had deliveries left.
#[test]
fn over_socket_mode_a_dispatch_that_lets_a_held_event_go_is_found_losing_it() {
    let report = Explorer::new(echo::app)
        .request(Request::mention("hello"))
        .socket_mode()
        .plant_socket_lets_held_go()
        .seed(7)
        .run();
    let (_, failure) = report
        .failures()
        .next()
        .expect("the explorer finds the event lost");
    assert!(
        failure
            .broken
            .iter()
            .any(|b| b.starts_with("counted when lost")),
        "{report}"
    );
    // One fault: the claimant dies between its claim and its acknowledgement.
    assert_eq!(failure.schedule.faults.len(), 1, "{report}");
    assert!(failure.schedule.to_text().contains("dies-"), "{report}");
    let text = report.to_string();
    for part in ["Slack retries", "(retry 3)", "in_progress"] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    // The dispatch as it is keeps the retry in hand, and answers.
    Explorer::new(echo::app)
        .request(Request::mention("hello"))
        .socket_mode()
        .replay(&failure.schedule.to_text())
        .run()
        .assert_ok();
}

#[test]
fn over_socket_mode_an_event_a_ghost_connection_swallows_is_redelivered_and_answered() {
    let report = Explorer::new(echo::app)
        .request(Request::mention("hello"))
        .socket_mode()
        .replay("plain; 1.0=dies-before")
        .run();
    report.assert_ok();
    let trace = report.explored[0].replayed.clone().unwrap_or_default();
    for part in [
        "ghost connection",
        "no acknowledgement",
        "(retry 1)",
        "answers Slack 200",
    ] {
        assert!(trace.contains(part), "{part:?} in {trace}");
    }
}

#[test]
fn over_socket_mode_a_command_is_never_delivered_again() {
    let report = Explorer::new(slack_once::reference_app)
        .request(Request::command("/once", "hello"))
        .socket_mode()
        .replay("plain; 1.0=dies-before")
        .run();
    report.assert_ok();
    let trace = report.explored[0].replayed.clone().unwrap_or_default();
    assert!(trace.contains("ghost connection"), "{trace}");
    assert!(!trace.contains("Slack retries"), "{trace}");
}

/// The fleet's mix with half its schedules delivered over Socket Mode, the other half over
/// HTTP: every invariant holds in both.
#[test]
fn a_fleet_with_half_its_traffic_over_socket_mode_keeps_every_invariant() {
    use super::simulate::{fleet_app, fleet_mix};
    use slack_once::testing::explore::Simulation;
    let report = fleet_mix(Simulation::new(fleet_app).old_version(fleet_app))
        .socket_mode(500)
        .requests(600)
        .seed(1)
        .run();
    eprintln!("{report}");
    report.assert_ok();
    assert!(
        report.socket_mode > 0 && report.socket_mode < report.schedules,
        "{report}"
    );
    assert!(report.to_string().contains("delivered over Socket Mode"));
}
