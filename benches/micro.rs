//! criterion benches: signature verification, envelope parsing, the router handling one
//! signed app_mention end to end (in-memory ledger; Slack stand-in on 127.0.0.1), and the
//! metrics line of one invocation.
//!
//!   cargo bench --bench micro

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use http::HeaderMap;
use slack_once::Application;
use slack_once::config::{Config, Secret, SigningSecrets};
use slack_once::ledger::MemoryLedger;
use slack_once::reference_app;
use slack_once::slack::envelope::Envelope;
use support::*;
use tower::ServiceExt;

fn body_of_size(size: usize) -> Vec<u8> {
    let mut body = app_mention("EvBenchSig").into_bytes();
    body.pop(); // the closing brace
    body.extend_from_slice(b",\"padding\":\"");
    while body.len() < size - 2 {
        body.push(b'x');
    }
    body.extend_from_slice(b"\"}");
    body
}

fn signature(c: &mut Criterion) {
    let secrets = SigningSecrets::parse(SECRET).unwrap();
    let mut group = c.benchmark_group("signature");
    for (name, size) in [("verify_1KB", 1024), ("verify_40KB", 40 * 1024)] {
        let body = body_of_size(size);
        let now = now_unix();
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-slack-request-timestamp",
            now.to_string().parse().unwrap(),
        );
        headers.insert(
            "x-slack-signature",
            slack_once::slack::signature::sign(&Secret::new(SECRET), now, &body)
                .parse()
                .unwrap(),
        );
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                slack_once::slack::signature::verify_at(&secrets, &headers, &body, now).unwrap()
            })
        });
    }
    group.finish();
}

fn envelope(c: &mut Criterion) {
    let body = app_mention("EvBenchParse");
    c.bench_function("envelope/parse_app_mention", |b| {
        b.iter(|| match serde_json::from_str::<Envelope>(&body).unwrap() {
            Envelope::EventCallback(cb) => cb,
            _ => unreachable!(),
        })
    });
}

fn router(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let slack = rt.block_on(SlackStub::start());
    let app = |token: Option<&str>| {
        let vars: std::collections::HashMap<&str, String> = [
            Some(("SLACK_SIGNING_SECRET", SECRET.to_string())),
            Some(("SLACK_API_URL", slack.base_url.clone())),
            // The metrics line is measured on its own below, not written to the report.
            Some(("METRICS", "off".to_string())),
            token.map(|t| ("SLACK_BOT_TOKEN", t.to_string())),
        ]
        .into_iter()
        .flatten()
        .collect();
        let config = Config::from_lookup(|k| vars.get(k).cloned()).unwrap();
        Application::with_parts(config, Arc::new(MemoryLedger::new()), reference_app()).router()
    };
    let counter = AtomicUsize::new(0);
    let request = |body: &str| {
        let mut request = http::Request::builder().method("POST").uri("/slack/events");
        for (k, v) in signed_headers(body.as_bytes()) {
            request = request.header(k, v);
        }
        request
            .body(axum::body::Body::from(body.to_string()))
            .unwrap()
    };

    let mut group = c.benchmark_group("router");
    // Each iteration sends the request `next()` makes through `router` and expects a 200.
    let mut bench =
        |name: &str, router: &axum::Router, next: &dyn Fn() -> http::Request<axum::body::Body>| {
            group.bench_function(name, |b| {
                b.to_async(&rt).iter_batched(
                    next,
                    |req| {
                        let router = router.clone();
                        async move { assert_eq!(router.oneshot(req).await.unwrap().status(), 200) }
                    },
                    BatchSize::SmallInput,
                )
            });
        };
    let fresh = |prefix: &str| {
        request(&app_mention(&format!(
            "{prefix}{}",
            counter.fetch_add(1, Ordering::Relaxed)
        )))
    };
    // The whole path with a real HTTP post to the stand-in on 127.0.0.1.
    let with_slack = app(Some("xoxb-bench"));
    bench("app_mention_first_delivery", &with_slack, &|| {
        fresh("EvFirst")
    });
    // Without a token the reply is logged, not posted: the handler's own overhead.
    let no_network = app(None);
    bench(
        "app_mention_first_delivery_no_network",
        &no_network,
        &|| fresh("EvLocal"),
    );
    // Every copy after the first: one failed conditional claim.
    let dup = app_mention("EvDuplicate");
    rt.block_on(with_slack.clone().oneshot(request(&dup)))
        .unwrap();
    bench("app_mention_duplicate", &with_slack, &|| request(&dup));
    group.finish();
}

/// What one invocation's metrics line costs: its counts, then formatting it (not the write).
fn metrics_line(c: &mut Criterion) {
    c.bench_function("metrics/line_of_a_delivery", |b| {
        b.iter(|| {
            let metrics = slack_once::testing::wiring::Metrics::new();
            for name in ["Deliveries", "Answered"] {
                metrics.count(name);
            }
            metrics.time_ms("HandlerLatency", 0.1);
            metrics.time_ms("TimeToAck", 0.2);
            metrics.line("42", false, &[("RequestId", "8f5b0c6e-7a1d")])
        })
    });
}

criterion_group!(benches, signature, envelope, router, metrics_line);
criterion_main!(benches);
