//! Metrics in CloudWatch's embedded metric format (EMF): one JSON line on stdout per invocation
//! (a delivery, a queued event, a worker's batch), which CloudWatch Logs turns into metrics with
//! no API call. Every metric is published twice: by `FunctionVersion` (to compare a canary with
//! the version it replaces) and without dimensions (what the alarms watch).
//!
//! The counts of one invocation are kept in a task-local [`Metrics`], so that concurrent
//! deliveries in one process (the local server, a worker's records) never mix; code deep in the
//! stack (the Slack client waiting out a 429) adds to whichever invocation it works for.
//! A writer of our own rather than a crate: see the README's choices.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{Map, Value, json};

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "SlackOnce";

/// Whether no invocation of this process has emitted its line yet (the first is the cold one).
static COLD: AtomicBool = AtomicBool::new(true);

#[derive(Debug, Default)]
struct Values {
    counts: BTreeMap<&'static str, f64>,
    timings: BTreeMap<&'static str, Vec<f64>>,
}

/// Where each invocation's metrics line goes.
#[derive(Clone, Debug, Default)]
pub enum MetricsOut {
    /// Printed on stdout (CloudWatch Logs reads it there).
    #[default]
    Stdout,
    /// Not made (`METRICS=off`).
    Off,
    /// Kept in memory, in order (tests read them: a `TestBot`'s `metrics`).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    Kept(Arc<Mutex<Vec<String>>>),
}

/// The metrics of one invocation. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct Metrics(Arc<Mutex<Values>>);

tokio::task_local! {
    static CURRENT: Metrics;
}

/// Adds 1 to the count `name` of the current invocation (nothing outside one).
pub fn count(name: &'static str) {
    let _ = CURRENT.try_with(|m| m.count(name));
}

/// Records a duration in milliseconds under `name` for the current invocation.
pub fn time_ms(name: &'static str, ms: f64) {
    let _ = CURRENT.try_with(|m| m.time_ms(name, ms));
}

impl Metrics {
    /// Empty metrics, for one invocation.
    pub fn new() -> Self {
        Self::default()
    }

    /// `work`, run with these metrics as the current invocation's.
    pub fn scope<F: std::future::Future>(
        &self,
        work: F,
    ) -> tokio::task::futures::TaskLocalFuture<Metrics, F> {
        CURRENT.scope(self.clone(), work)
    }

    /// Adds 1 to the count `name`.
    pub fn count(&self, name: &'static str) {
        let mut values = self.0.lock().expect("metrics lock");
        *values.counts.entry(name).or_default() += 1.0;
    }

    /// Records a duration in milliseconds under `name`.
    pub fn time_ms(&self, name: &'static str, ms: f64) {
        let mut values = self.0.lock().expect("metrics lock");
        values.timings.entry(name).or_default().push(ms);
    }

    /// The EMF line of these metrics, `None` when nothing was recorded. `properties` are
    /// searchable fields that are not dimensions (the request id).
    pub fn line(
        &self,
        version: &str,
        cold_start: bool,
        properties: &[(&str, &str)],
    ) -> Option<String> {
        let values = self.0.lock().expect("metrics lock");
        if values.counts.is_empty() && values.timings.is_empty() {
            return None;
        }
        let now_ms = crate::clock::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut root = Map::new();
        let mut definitions = Vec::new();
        let mut counts = values.counts.clone();
        if cold_start {
            counts.insert("ColdStart", 1.0);
        }
        for (name, value) in &counts {
            definitions.push(json!({"Name": name, "Unit": "Count"}));
            root.insert((*name).to_string(), json!(value));
        }
        for (name, samples) in &values.timings {
            definitions.push(json!({"Name": name, "Unit": "Milliseconds"}));
            // EMF takes up to 100 values per metric in one line.
            let samples: Vec<f64> = samples.iter().take(100).copied().collect();
            root.insert((*name).to_string(), json!(samples));
        }
        for (key, value) in properties {
            root.insert((*key).to_string(), Value::String((*value).to_string()));
        }
        root.insert("FunctionVersion".into(), Value::String(version.to_string()));
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": now_ms,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [["FunctionVersion"], []],
                    "Metrics": definitions,
                }],
            }),
        );
        Some(Value::Object(root).to_string())
    }

    /// Writes the EMF line on stdout (where Lambda's log agent takes it from), whole, in one
    /// write: the one place this crate writes to stdout outside `tracing`.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn emit(&self, version: &str, properties: &[(&str, &str)]) {
        self.emit_to(&MetricsOut::Stdout, version, properties)
    }

    /// The line of these metrics, where `out` says.
    pub fn emit_to(&self, out: &MetricsOut, version: &str, properties: &[(&str, &str)]) {
        match out {
            MetricsOut::Off => {}
            MetricsOut::Stdout => {
                let cold = COLD.swap(false, Ordering::Relaxed);
                if let Some(line) = self.line(version, cold, properties) {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                }
            }
            MetricsOut::Kept(lines) => {
                if let Some(line) = self.line(version, false, properties) {
                    lines.lock().expect("metrics lock").push(line);
                }
            }
        }
    }

    /// The counts recorded so far, by name.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn counts(&self) -> BTreeMap<&'static str, f64> {
        self.0.lock().expect("metrics lock").counts.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_is_emf_with_every_metric_declared_and_both_dimension_sets() {
        let metrics = Metrics::new();
        metrics
            .scope(async {
                count("Answered");
                count("Answered");
                time_ms("HandlerLatency", 12.5);
            })
            .await;
        count("Outside"); // no invocation: ignored
        let line = metrics.line("7", true, &[("RequestId", "r-1")]).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        let directive = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], NAMESPACE);
        assert_eq!(directive["Dimensions"], json!([["FunctionVersion"], []]));
        let names: Vec<&str> = directive["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Answered", "ColdStart", "HandlerLatency"]);
        for name in names {
            assert!(
                !v[name].is_null(),
                "every declared metric has its member: {name}"
            );
        }
        assert_eq!(v["Answered"], 2.0);
        assert_eq!(v["HandlerLatency"], json!([12.5]));
        assert_eq!(v["FunctionVersion"], "7");
        assert_eq!(v["RequestId"], "r-1");
        assert!(v["_aws"]["Timestamp"].as_u64().unwrap() > 1_700_000_000_000);
        assert!(
            Metrics::new().line("7", false, &[]).is_none(),
            "nothing recorded, no line"
        );
    }
}
