//! One integration-test binary: the app on port 0, a Slack stand-in, DynamoDB Local.

mod assistant;
mod binary;
mod bot_api;
mod core;
mod deferred;
mod deploy;
mod dynamo;
mod faults;
mod formats;
mod hardening;
mod hardening2;
mod helpers;
mod interactivity;
mod lambda;
mod operations;
mod performance;
mod poll;
mod processes;
mod redrive;
mod redteam16;
mod rejections;
mod review;
mod soak;
mod standins;
mod tenants;
mod workspaces;
