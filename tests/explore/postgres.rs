//! The fleet simulation on PostgreSQL (`Simulation::on_postgres`): the fleet's mix, each
//! schedule's ledger `PostgresLedger` on a schema of its own on the local server
//! (scripts/postgres-local.sh, 127.0.0.1, `POSTGRES_LOCAL_PORT`), checked by every invariant
//! the in-memory run checks.

use super::simulate::{soak, soak_mix};
use super::simulation::{assert_the_fleets_mix_held, fleets_mix};
use slack_once::testing::explore::Simulation;

/// Requests in the bounded run on PostgreSQL: `SLACK_ONCE_SIMULATE_POSTGRES` (3,000 unless set:
/// 35 to 65 s on two cores).
fn bounded() -> u64 {
    std::env::var("SLACK_ONCE_SIMULATE_POSTGRES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(3_000)
}

/// The local PostgreSQL's `postgres` database; fails naming the script when nothing answers
/// there (never skips silently).
fn postgres_url() -> String {
    let port: u16 = std::env::var("POSTGRES_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5433);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    if std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)).is_err() {
        panic!(
            "PostgreSQL is not answering on 127.0.0.1:{port}: start it with \
             `scripts/postgres-local.sh start` (scripts/test.sh starts and stops it for you)"
        );
    }
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

/// As `simulation::the_fleets_mix_keeps_every_invariant_and_every_kind_is_answered`, on
/// PostgreSQL: the same mix, settings and checks, fewer requests.
#[test]
#[ignore = "needs PostgreSQL"]
fn on_postgresql_the_fleets_mix_keeps_every_invariant_and_every_kind_is_answered() {
    let report = fleets_mix(bounded()).on_postgres(&postgres_url()).run();
    assert_the_fleets_mix_held(&report, bounded());
}

/// The ledger planted with a defect, on PostgreSQL: a takeover's completion dropped and
/// answered as made. The checks read the claims PostgreSQL holds at the end: the claim left in
/// progress by a run that ended well breaks "nothing claimed past its lease at the end".
#[test]
#[ignore = "needs PostgreSQL"]
fn on_postgresql_a_takeovers_completion_dropped_is_found() {
    let report = soak_mix(Simulation::new(soak::app))
        .plant_dropped_takeover_finish()
        .requests(2_000)
        .seed(1)
        .on_postgres(&postgres_url())
        .run();
    let text = report.to_string();
    let failure = report.failure.as_ref().expect("the defect is found");
    assert!(failure.schedule_number.is_some(), "{text}");
    for part in [
        "nothing claimed past its lease at the end",
        "neither died nor met a ledger call failing",
        "(dropped: the planted defect)",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
}
