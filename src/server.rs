//! Local mode's HTTP server: hyper's HTTP/1 connection on each accepted socket, with the limits
//! a server open to a network needs. A client gets [`HEADER_READ_TIMEOUT`] to send its request
//! head (and the route [`crate::http::BODY_READ_TIMEOUT`] for its body); at most
//! `MAX_CONNECTIONS` connections are served at once, the next ones wait in the listen backlog.
//! At shutdown it stops accepting, lets every delivery in flight run to its end (each is bounded
//! by its lease), gives answers [`SHUTDOWN_GRACE`] to get out, and then closes what is left: a
//! client that never finishes its request does not hold the process.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

/// A request head still incomplete after this long closes the connection (Slack gives up
/// after 3 s: nothing legitimate is this slow).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// After the deliveries in flight have ended, answers have this long to get out.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Local mode's HTTP server, bound and ready.
pub struct LocalServer {
    pub(crate) listener: TcpListener,
    pub(crate) router: Router,
    pub(crate) in_flight: TaskTracker,
    pub(crate) max_connections: usize,
    /// Socket Mode's connections, opened when it runs and drained first at shutdown.
    pub(crate) socket_mode: Option<crate::socket_mode::SocketModeIngress>,
}

impl LocalServer {
    /// The address it listens on (with the port picked, when `LISTEN_ADDR` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` completes, then stops accepting, finishes the deliveries in
    /// flight and closes the connections.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let graceful = GracefulShutdown::new();
        let slots = Arc::new(Semaphore::new(self.max_connections));
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT);
        if let Some(socket_mode) = &self.socket_mode {
            socket_mode.start();
        }
        tokio::pin!(shutdown);
        loop {
            let slot = tokio::select! {
                slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
                () = &mut shutdown => break,
            };
            let stream = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        // Out of file descriptors and the like: wait, do not stop serving.
                        tracing::warn!(error = %error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let _ = stream.set_nodelay(true);
            let service = TowerToHyperService::new(self.router.clone());
            let connection =
                graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(error = %error, "connection ended with an error");
                }
                drop(slot);
            });
        }
        if let Some(socket_mode) = &self.socket_mode {
            socket_mode.drain().await;
        }
        drop(self.listener);
        // Idle and keep-alive connections close now; a request in flight finishes first.
        let connections = tokio::spawn(graceful.shutdown());
        self.in_flight.close();
        self.in_flight.wait().await;
        if tokio::time::timeout(SHUTDOWN_GRACE, connections)
            .await
            .is_err()
        {
            tracing::info!("closing connections that never completed a request");
        }
        Ok(())
    }
}
