//! Test helpers: the Secrets Manager server (moto).

pub fn secrets_client(endpoint: &str) -> aws_sdk_secretsmanager::Client {
    local_client!(aws_sdk_secretsmanager, endpoint)
}

/// The EMF metric lines a process printed, parsed.
pub fn metric_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| l.starts_with('{') && l.contains("\"_aws\""))
        .map(|l| serde_json::from_str(l).expect("an EMF line is JSON"))
        .collect()
}

/// The sum of metric `name` over `lines`.
pub fn metric_sum(lines: &[serde_json::Value], name: &str) -> f64 {
    lines.iter().filter_map(|l| l[name].as_f64()).sum()
}
