//! What every AWS SDK client of this crate shares: one configuration loaded once per process,
//! and one HTTP stack, the same as the Slack client's (hyper, rustls on ring, the root
//! certificates compiled in: one TLS configuration for every client, no certificate store read
//! from disk), with `TCP_NODELAY` and pooled keep-alive connections. At most 3 attempts in
//! total, and timeouts bounded so that a slow service turns into a failure the protocol handles
//! (a 503, a release) rather than a Lambda timeout. Region, credentials and endpoints come from
//! the environment as usual (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`,
//! `AWS_ENDPOINT_URL_SECRETS_MANAGER`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_runtime_api::client::connection::{CaptureSmithyConnection, ConnectionMetadata};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::ErrorKind;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::OnceCell;

/// The TLS configuration of every client of the process: rustls on ring, TLS 1.2 and 1.3, the
/// web's root certificates compiled in (webpki-roots). Built once.
pub fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            // ALPN (HTTP/1.1) is set by each connector (`enable_http1`).
            let config = rustls::ClientConfig::builder_with_provider(
                rustls::crypto::ring::default_provider().into(),
            )
            .with_safe_default_protocol_versions()
            .expect("ring supports TLS 1.2 and 1.3")
            .with_root_certificates(rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            })
            .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

/// An HTTPS (or, for local servers, HTTP) connector on the shared TLS configuration.
pub fn https_connector(connect_timeout: Duration) -> HttpsConnector<TcpConnector> {
    let mut tcp = TcpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(Some(connect_timeout));
    tcp.set_nodelay(true);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls_config()).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp)
}

/// The SDK's HTTP client: hyper on the shared TLS stack. One connection pool per process,
/// shared by every SDK client.
#[derive(Clone, Debug)]
pub struct SdkHttp {
    client: Client<HttpsConnector<TcpConnector>, SdkBody>,
}

impl SdkHttp {
    fn new() -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(https_connector(Duration::from_secs(1)));
        Self { client }
    }
}

impl HttpClient for SdkHttp {
    fn http_connector(
        &self,
        _settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        // The connect timeout is the connector's own (1 s); read and operation timeouts are
        // the SDK's, applied around every attempt.
        SharedHttpConnector::new(self.clone())
    }
}

impl HttpConnector for SdkHttp {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let mut request = match request.try_into_http1x() {
            Ok(request) => request,
            Err(e) => return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into()))),
        };
        // The connection the request goes out on, for the SDK's connection poisoning: after a
        // transient failure (a 500, a 503, a body cut short) the SDK marks it not to be reused,
        // so the retry opens a fresh one, as with the SDK's own client.
        let captured = hyper_util::client::legacy::connect::capture_connection(&mut request);
        if let Some(smithy) = request.extensions().get::<CaptureSmithyConnection>() {
            smithy.set_connection_retriever(move || {
                captured.connection_metadata().as_ref()?;
                let captured = captured.clone();
                Some(
                    ConnectionMetadata::builder()
                        .proxied(false)
                        .poison_fn(move || {
                            if let Some(connection) = captured.connection_metadata().as_ref() {
                                connection.poison();
                            }
                        })
                        .build(),
                )
            });
        }
        let sent = self.client.request(request);
        HttpConnectorFuture::new(async move {
            match sent.await {
                Ok(response) => HttpResponse::try_from(response.map(SdkBody::from_body_1_x))
                    .map_err(|e| ConnectorError::other(e.into(), None)),
                Err(e) => Err(connector_error(e)),
            }
        })
    }
}

/// What a failed request means to the SDK's retries, as its own client classifies it: a
/// connection that could not be made or was lost (the answer of a write may be lost with it:
/// the write is sent again, and the ledger recognises it by its owner) is an I/O error, retried.
fn connector_error(error: hyper_util::client::legacy::Error) -> ConnectorError {
    if error.is_connect() {
        return ConnectorError::io(error.into());
    }
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>() {
            if hyper.is_timeout() {
                return ConnectorError::timeout(error.into());
            }
            if hyper.is_user() {
                return ConnectorError::user(error.into());
            }
            if hyper.is_closed() || hyper.is_canceled() || hyper.is_incomplete_message() {
                return ConnectorError::other(error.into(), Some(ErrorKind::TransientError));
            }
        }
        if cause.is::<std::io::Error>() {
            return ConnectorError::io(error.into());
        }
        source = cause.source();
    }
    ConnectorError::other(error.into(), None)
}

/// The SDK's HTTP client, built once per process.
pub fn http_client() -> SharedHttpClient {
    static CLIENT: OnceLock<SharedHttpClient> = OnceLock::new();
    CLIENT
        .get_or_init(|| SharedHttpClient::new(SdkHttp::new()))
        .clone()
}

/// A new SDK HTTP client with a pool of its own. A connection belongs to the tokio runtime that
/// opened it: a process runs one, and shares [`http_client`]; tests, whose every test has a
/// runtime of its own, take one of these per client.
#[cfg_attr(not(feature = "testing"), allow(dead_code))] // the test kit's, and tests'
pub fn new_http_client() -> SharedHttpClient {
    SharedHttpClient::new(SdkHttp::new())
}

/// The shared configuration, loaded once per process (the region, the credentials provider,
/// endpoints from the environment), with default timeouts (each client sets its own).
pub async fn sdk_config() -> &'static SdkConfig {
    static CONFIG: OnceCell<SdkConfig> = OnceCell::const_new();
    CONFIG
        .get_or_init(|| async {
            aws_config::defaults(BehaviorVersion::latest())
                .http_client(http_client())
                .retry_config(RetryConfig::standard().with_max_attempts(3))
                .timeout_config(timeouts(Duration::from_secs(2), Duration::from_secs(5)))
                .load()
                .await
        })
        .await
}

/// Timeouts of one attempt and of a whole operation (its attempts included).
pub fn timeouts(attempt: Duration, operation: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(1))
        .operation_attempt_timeout(attempt)
        .operation_timeout(operation)
        .build()
}
