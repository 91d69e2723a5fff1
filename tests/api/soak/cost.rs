//! The cost per million requests, computed from what the soak counted (its proxies, its
//! deliveries, the fleet's output) at AWS's list prices.

use std::collections::HashMap;
use std::time::Duration;

use super::mix::Kind;
use super::proxy::Counts;

/// AWS's list prices in us-east-1 (N. Virginia), as checked on 2026-12-03: on-demand DynamoDB
/// (since November 2024), Lambda on arm64, SQS standard queues, Secrets Manager, CloudWatch
/// Logs' standard ingestion. Free tiers left out.
pub mod price {
    /// Per million write request units.
    pub const DYNAMO_WRITE_MILLION: f64 = 0.625;
    /// Per million read request units.
    pub const DYNAMO_READ_MILLION: f64 = 0.125;
    /// Per million requests (each 64 KB of payload is one).
    pub const SQS_MILLION: f64 = 0.40;
    /// Per million invocations.
    pub const LAMBDA_MILLION: f64 = 0.20;
    /// Per GB-second on arm64.
    pub const LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;
    /// Per 10,000 API calls.
    pub const SECRETS_10K: f64 = 0.05;
    /// Per GB ingested.
    pub const LOGS_GB: f64 = 0.50;
    /// The functions' memory in the template (`MemorySize`), in GB.
    pub const LAMBDA_GB: f64 = 0.25;
    /// What Lambda itself logs per invocation (its START, END and REPORT lines), in bytes.
    pub const PLATFORM_LOG_BYTES: u64 = 260;
}

/// What one kind of request used, summed over the run.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    pub requests: u64,
    /// Deliveries to an ingress that were answered, and their time (the invocation's).
    pub ingress_invocations: u64,
    pub ingress_time: Duration,
    /// Queue messages a worker handled (deleted), and their time from receipt to delete;
    /// messages left to come back, each taken at the worker's lease (an upper bound).
    pub worker_invocations: u64,
    pub worker_time: Duration,
    pub write_units: f64,
    pub read_units: f64,
    pub dynamo_requests: u64,
    pub sqs_units: u64,
}

/// The dollars per million requests of a usage, by item.
#[derive(Clone, Debug, Default)]
pub struct Dollars {
    pub lambda_requests: f64,
    pub lambda_duration: f64,
    pub dynamo: f64,
    pub sqs: f64,
    pub secrets: f64,
    pub logs: f64,
}

impl Dollars {
    pub fn total(&self) -> f64 {
        self.lambda_requests
            + self.lambda_duration
            + self.dynamo
            + self.sqs
            + self.secrets
            + self.logs
    }
}

/// Everything the run counted that is not per kind.
pub struct Fleetwide {
    pub secret_reads: u64,
    /// Processes started (each reads the secret once).
    pub starts: u64,
    pub log_bytes: u64,
    pub metric_lines: u64,
    pub requests: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.requests += other.requests;
        self.ingress_invocations += other.ingress_invocations;
        self.ingress_time += other.ingress_time;
        self.worker_invocations += other.worker_invocations;
        self.worker_time += other.worker_time;
        self.write_units += other.write_units;
        self.read_units += other.read_units;
        self.dynamo_requests += other.dynamo_requests;
        self.sqs_units += other.sqs_units;
    }

    /// Per million requests, at list prices; the fleet-wide items shared by request.
    pub fn dollars(&self, fleet: &Fleetwide) -> Dollars {
        let per = 1_000_000.0 / self.requests.max(1) as f64;
        let invocations = (self.ingress_invocations + self.worker_invocations) as f64;
        let seconds = (self.ingress_time + self.worker_time).as_secs_f64();
        let log_bytes_per_request = fleet.log_bytes as f64 / fleet.requests.max(1) as f64;
        let platform = invocations * price::PLATFORM_LOG_BYTES as f64;
        Dollars {
            lambda_requests: invocations * per * price::LAMBDA_MILLION / 1e6,
            lambda_duration: seconds * per * price::LAMBDA_GB * price::LAMBDA_GB_SECOND,
            dynamo: per
                * (self.write_units * price::DYNAMO_WRITE_MILLION
                    + self.read_units * price::DYNAMO_READ_MILLION)
                / 1e6,
            sqs: self.sqs_units as f64 * per * price::SQS_MILLION / 1e6,
            secrets: fleet.secret_reads as f64 / fleet.requests.max(1) as f64
                * 1e6
                * price::SECRETS_10K
                / 1e4,
            logs: (log_bytes_per_request * self.requests as f64 + platform) * per / 1e9
                * price::LOGS_GB,
        }
    }
}

/// Adds the proxies' counts to each kind's usage (`None`: the fleet's own, shared out by
/// request at the end).
pub fn add_counts(usage: &mut HashMap<Option<Kind>, Usage>, dynamo: &Counts, sqs: &Counts) {
    for ((kind, _op), tally) in dynamo {
        let u = usage.entry(*kind).or_default();
        u.write_units += tally.write_units;
        u.read_units += tally.read_units;
        u.dynamo_requests += tally.requests;
    }
    for ((kind, op), tally) in sqs {
        if op == "GetSecretValue" {
            continue;
        }
        usage.entry(*kind).or_default().sqs_units += tally.units;
    }
}

/// Prints the cost per million requests of each kind and of the mix.
pub fn report(usage: &HashMap<Option<Kind>, Usage>, fleet: &Fleetwide) -> f64 {
    println!(
        "\nCost per million requests (us-east-1 list prices checked 2026-12-03; Lambda arm64 at \
         {} MB; the worker as if each message were its own invocation, an upper bound):",
        (price::LAMBDA_GB * 1024.0) as u64
    );
    println!(
        "| kind | requests | Lambda invocations / req | Lambda ms / req | DynamoDB WRU / req | RRU / req | SQS requests / req | Lambda $ | DynamoDB $ | SQS $ | Secrets Manager $ | Logs $ | total $ |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut mix = Usage::default();
    let shared = usage.get(&None).cloned().unwrap_or_default();
    for kind in Kind::ALL {
        let Some(u) = usage.get(&Some(kind)) else {
            continue;
        };
        mix.add(u);
        row(kind.name(), u, fleet);
    }
    // The fleet's own (sweeps of leases, polls of an empty queue) is the mix's, not a kind's.
    mix.add(&Usage {
        requests: 0,
        ..shared
    });
    let total = row("**the mix**", &mix, fleet);
    println!(
        "Fleet-wide, shared by request: {} Secrets Manager reads ({} process starts, each reading \
         the secret once: the soak's kills restart far more often than Lambda starts cold), \
         {:.0} bytes of log per request plus Lambda's own {} per invocation, {} metric lines.",
        fleet.secret_reads,
        fleet.starts,
        fleet.log_bytes as f64 / fleet.requests.max(1) as f64,
        price::PLATFORM_LOG_BYTES,
        fleet.metric_lines
    );
    total
}

fn row(name: &str, u: &Usage, fleet: &Fleetwide) -> f64 {
    let n = u.requests.max(1) as f64;
    let d = u.dollars(fleet);
    let invocations = u.ingress_invocations + u.worker_invocations;
    println!(
        "| {name} | {} | {:.2} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
        u.requests,
        invocations as f64 / n,
        (u.ingress_time + u.worker_time).as_secs_f64() * 1000.0 / n,
        u.write_units / n,
        u.read_units / n,
        u.sqs_units as f64 / n,
        d.lambda_requests + d.lambda_duration,
        d.dynamo,
        d.sqs,
        d.secrets,
        d.logs,
        d.total()
    );
    d.total()
}
