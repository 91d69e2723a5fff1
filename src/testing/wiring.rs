//! Parts of slack-once's own wiring that its tests and benchmarks reach beside the public API:
//! the AWS SDK's HTTP client on slack-once's TLS stack (for a DynamoDB Local client of a test's
//! own), and the metrics lines an invocation writes (kept in memory to be read back).

pub use crate::aws::{http_client as aws_http_client, new_http_client as new_aws_http_client};
pub use crate::metrics::{Metrics, MetricsOut};

use crate::workspaces::Workspaces;

/// Has `workspaces` write its metrics (a token refresh's own line) to `out`, as the application
/// wires it with the deployment's `version`.
pub fn keep_metrics(workspaces: &Workspaces, out: MetricsOut, version: &str) {
    workspaces.set_metrics(out, version);
}
