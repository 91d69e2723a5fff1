//! The connections the Slack client opens: TLS (or plain HTTP to this machine) to Slack, or
//! in-process connections to a simulated Slack.
//!
//! The in-process kind is for the crash explorer (the `explore` feature): each connection is a
//! pipe in memory whose other end is served by a real HTTP server (hyper) in the same
//! runtime, so the client speaks HTTP exactly as it does to Slack, a dropped connection fails
//! as a dropped connection does, and no socket is opened (a schedule runs on virtual time,
//! which a socket's kernel buffers would not follow).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What serves one in-process connection: given the server's end of the pipe, it spawns
/// whatever answers on it.
pub type Serve = Arc<dyn Fn(DuplexStream) + Send + Sync>;

/// How the Slack client connects.
#[derive(Clone)]
pub(crate) enum Connector {
    /// To Slack's hosts over TLS (or to a stand-in on this machine over plain HTTP).
    Https(HttpsConnector<HttpConnector>),
    /// In process: every connection, whatever its host, is a pipe `Serve` answers.
    #[cfg_attr(not(feature = "explore"), allow(dead_code))]
    Memory(Serve),
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connector::Https(_) => "Connector::Https",
            Connector::Memory(_) => "Connector::Memory",
        })
    }
}

/// One connection of either kind.
pub(crate) enum Io {
    /// A TCP connection, over TLS or plain HTTP.
    Https(Box<MaybeHttpsStream<TokioIo<TcpStream>>>),
    /// An in-process pipe, whose other end a [`Serve`] answers.
    Memory(TokioIo<DuplexStream>),
}

/// The pipe's buffer each way: Slack's answers are a few KB.
const PIPE_BYTES: usize = 256 * 1024;

impl tower::Service<Uri> for Connector {
    type Response = Io;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Io, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Connector::Https(https) => https.poll_ready(cx),
            Connector::Memory(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        match self {
            Connector::Https(https) => {
                let connecting = https.call(uri);
                Box::pin(async move { Ok(Io::Https(Box::new(connecting.await?))) })
            }
            Connector::Memory(serve) => {
                let (client, server) = tokio::io::duplex(PIPE_BYTES);
                serve(server);
                Box::pin(async move { Ok(Io::Memory(TokioIo::new(client))) })
            }
        }
    }
}

impl Connection for Io {
    fn connected(&self) -> Connected {
        match self {
            Io::Https(stream) => stream.connected(),
            Io::Memory(_) => Connected::new(),
        }
    }
}

impl hyper::rt::Read for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Https(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
            Io::Memory(pipe) => Pin::new(pipe).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Https(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
            Io::Memory(pipe) => Pin::new(pipe).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Https(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
            Io::Memory(pipe) => Pin::new(pipe).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Https(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
            Io::Memory(pipe) => Pin::new(pipe).poll_shutdown(cx),
        }
    }
}

/// Serves `service` (an HTTP service such as an axum `Router`) on every in-process connection.
/// (The explorer's: a bot's own build connects only to Slack.)
#[cfg_attr(not(feature = "explore"), allow(dead_code))]
pub fn serve_http<S>(service: S) -> Serve
where
    S: tower::Service<
            http::Request<hyper::body::Incoming>,
            Response = http::Response<axum::body::Body>,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    Arc::new(move |pipe: DuplexStream| {
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(pipe), service)
                .await;
        });
    })
}
