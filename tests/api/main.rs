//! One integration-test binary: the app on port 0, a Slack stand-in, DynamoDB Local.
//! The tests that need DynamoDB Local, the SQS server, the built binary or
//! the previous release are `#[ignore = "needs …"]`: `scripts/test.sh` runs them too
//! (docs/test-suite.md, "Tiers").

mod agent;
mod agent_notes;
mod agent_processes;
mod assistant;
mod binary;
mod bot_api;
mod core;
mod deferred;
mod deploy;
mod dynamo;
mod faults;
mod formats;
mod gateway;
mod gateway_bolt;
mod gateway_faults;
mod gateway_fleet;
mod gateway_lambda;
mod gateway_sdk_retries;
mod helpers;
mod identity;
mod interactivity;
mod journal;
mod lambda;
mod operations;
mod performance;
mod poll;
mod postgres;
mod postgres_failover;
mod postgres_faults;
mod postgres_installations;
mod postgres_ledger;
mod postgres_processes;
mod postgres_queue;
mod processes;
mod redrive;
mod regressions;
mod rejections;
mod serving;
mod soak;
mod socket_mode;
mod socket_mode_ingress;
mod standin;
mod steps;
mod steps_processes;
mod takeovers;
mod tenants;
mod tokens_at_rest;
mod worker_kills;
mod workspaces;
