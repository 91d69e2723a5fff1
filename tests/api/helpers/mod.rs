//! Test helpers: the app on port 0, a real HTTP stand-in for Slack's Web API, signed requests,
//! and DynamoDB Local on 127.0.0.1. Nothing here talks to an address outside the loopback.
//! One submodule per kind of helper, each re-exported here: `crate::helpers::X` names them all.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use slack_once::Application;
use slack_once::config::{Config, Secret};
use slack_once::ledger::{DynamoLedger, Ledger, MemoryLedger};
use tokio::sync::oneshot;

pub const SECRET: &str = "test-signing-secret";
pub const TOKEN: &str = "xoxb-test-token";
pub const BOT_USER: &str = "UBOT";

/// Serves `router` on a free port of 127.0.0.1 until the returned sender is dropped.
pub async fn serve_loopback(router: Router) -> (SocketAddr, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (addr, tx)
}

mod app;
mod built_binary;
#[macro_use]
mod dynamodb_local;
mod dynamodb_proxy;
mod gateway;
mod lambda_runtime;
mod postgres_local;
mod postgres_proxy;
mod private_dynamodb;
mod secrets_manager;
mod signed_requests;
mod slack_standin;
mod sqs_server;

pub use app::*;
pub use built_binary::*;
pub use dynamodb_local::*;
pub use dynamodb_proxy::*;
pub use gateway::*;
pub use lambda_runtime::*;
pub use postgres_local::*;
pub use postgres_proxy::*;
pub use private_dynamodb::*;
pub use secrets_manager::*;
pub use signed_requests::*;
pub use slack_standin::*;
pub use sqs_server::*;
