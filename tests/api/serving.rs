//! The HTTP server: clients that go away or never finish their request, the connection cap,
//! and SIGTERM with slow clients.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use http::StatusCode;

use crate::helpers::*;

#[tokio::test]
async fn a_delivery_whose_client_went_away_still_completes_its_claim() {
    let app = spawn_app_with(Options {
        vars: vec![("DEDUP_LEASE_SECONDS", "20".into())],
        ..Default::default()
    })
    .await;
    app.slack
        .script([SlackFailure::Slow(Duration::from_millis(1500))]);
    let body = app_mention("EvGone", "x");
    // Slack gives up (here after 300 ms) and closes the connection.
    let gone = tokio::time::timeout(Duration::from_millis(300), app.send(&body, None)).await;
    assert!(gone.is_err(), "the client left before the answer");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The claim was completed, not left to block the event until its lease ends.
    let retry = app.send(&body, Some(1)).await;
    assert_eq!(retry.outcome(), "duplicate", "{}", retry.body);
    assert_eq!(app.slack.posted().len(), 1);
}

/// Opens a connection and sends the start of a request head, never the rest.
fn slowloris(addr: std::net::SocketAddr) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_request_head_never_finished_is_cut_off_after_the_header_timeout() {
    let bot = BotProcess::spawn(&[]);
    let mut stream = slowloris(bot.addr);
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(15),
        "closed after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn a_body_never_finished_gets_408_after_the_body_timeout() {
    let bot = BotProcess::spawn(&[]);
    let mut stream = std::net::TcpStream::connect(bot.addr).unwrap();
    stream
        .write_all(
            b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"type\":",
        )
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn connections_are_capped_and_a_freed_slot_serves_the_next() {
    let bot = BotProcess::spawn(&[("MAX_CONNECTIONS", "2".to_string())]);
    let first = slowloris(bot.addr);
    let _second = slowloris(bot.addr);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let http = HttpClient::default();
    let url = format!("http://{}/healthz", bot.addr);
    let waiting = {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move { http.request("GET", &url, &[], "").await })
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        !waiting.is_finished(),
        "a third connection waits for a slot"
    );
    drop(first);
    let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once a slot was freed")
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built binary"]
async fn sigterm_does_not_wait_on_slow_clients() {
    let bot = BotProcess::spawn(&[]);
    let _slow: Vec<_> = (0..3).map(|_| slowloris(bot.addr)).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    bot.terminate();
    let (code, log) = bot.exited().await;
    assert_eq!(code, Some(0), "{}", log);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "exited after {:?}",
        started.elapsed()
    );
}
