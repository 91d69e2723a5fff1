//! Test helpers: a TCP proxy on 127.0.0.1 in front of the local PostgreSQL that cuts
//! connections: one chosen statement's (the ledger's fault tests), or, drawn from a seed, any
//! statement's at stated rates, with some answers slowed (the soak on PostgreSQL).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to a statement it cuts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// The statement reaches the server whole, which runs and commits it; its answer is read
    /// and thrown away, and the client's connection closed: a lost answer.
    DropAnswer,
    /// Half the statement reaches the server; then both connections close: a reset before the
    /// statement was whole.
    HalfStatement,
}

/// Faults drawn for every statement (a client's write that starts with a Query, Parse or Bind
/// message), each per 10,000 statements, from a generator of the connection's own (seeded by
/// the proxy's seed and the connection's number).
#[derive(Clone, Copy, Debug)]
pub struct PostgresFaults {
    /// Both connections closed before the statement reaches the server: nothing of it runs.
    pub cut_before: u64,
    /// The statement runs and commits; its answer never reaches the process (the connection
    /// closes once the server has answered).
    pub answer_lost: u64,
    /// Its answer reaches the process 300 to 800 ms late.
    pub slow: u64,
}

/// The names [`CuttingProxy::injected`] counts faults under.
const CUT_BEFORE: &str = "cut before the statement";
const ANSWER_LOST: &str = "answer lost";
const SLOW: &str = "slow answer";

/// A TCP proxy on 127.0.0.1 in front of the PostgreSQL server that cuts connections in the
/// middle of a statement: the next one whose text holds an armed marker, and, when started
/// with [`CuttingProxy::start_random`], any at the rates of its [`PostgresFaults`].
pub struct CuttingProxy {
    port: u16,
    armed: Armed,
    /// Connections cut by an armed marker.
    pub cuts: Arc<AtomicUsize>,
    random: Arc<Random>,
}

type Armed = Arc<std::sync::Mutex<Option<(&'static str, Cut)>>>;

/// The seeded faults' settings and what they did.
struct Random {
    faults: Option<PostgresFaults>,
    seed: u64,
    faulting: AtomicBool,
    connections: AtomicU64,
    injected: std::sync::Mutex<HashMap<&'static str, u64>>,
}

/// xorshift64*, a connection's own, reproducible from the proxy's seed.
struct Rng(u64);

impl Rng {
    /// Connection `n`'s generator: its seed mixed (splitmix64), so that neighbouring
    /// connections' first draws are not alike.
    fn for_connection(seed: u64, n: u64) -> Self {
        let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The local PostgreSQL's port (POSTGRES_LOCAL_PORT, default 5433).
pub fn postgres_port() -> u16 {
    std::env::var("POSTGRES_LOCAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5433)
}

impl CuttingProxy {
    /// A proxy to the PostgreSQL server on 127.0.0.1:`upstream` that cuts only what is armed.
    pub async fn start(upstream: u16) -> Self {
        Self::start_with(upstream, None, 0).await
    }

    /// A proxy that also cuts and slows statements at the rates of `faults`, drawn from `seed`.
    pub async fn start_random(upstream: u16, faults: Option<PostgresFaults>, seed: u64) -> Self {
        Self::start_with(upstream, faults, seed).await
    }

    async fn start_with(upstream: u16, faults: Option<PostgresFaults>, seed: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Armed = Arc::new(std::sync::Mutex::new(None));
        let cuts = Arc::new(AtomicUsize::new(0));
        let random = Arc::new(Random {
            faults,
            seed,
            faulting: AtomicBool::new(true),
            connections: AtomicU64::new(0),
            injected: Default::default(),
        });
        let (armed2, cuts2, random2) = (armed.clone(), cuts.clone(), random.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let n = random2.connections.fetch_add(1, Ordering::Relaxed);
                let rng = Rng::for_connection(random2.seed, n);
                tokio::spawn(pipe(
                    client,
                    server,
                    armed2.clone(),
                    cuts2.clone(),
                    random2.clone(),
                    rng,
                ));
            }
        });
        Self {
            port,
            armed,
            cuts,
            random,
        }
    }

    /// Cuts the next statement whose text holds `marker`, as `cut` says.
    pub fn arm(&self, marker: &'static str, cut: Cut) {
        *self.armed.lock().unwrap() = Some((marker, cut));
    }

    /// The URL of `url`'s database through the proxy.
    pub fn url(&self, url: &str) -> String {
        url.replace(
            &format!(":{}/", postgres_port()),
            &format!(":{}/", self.port),
        )
    }

    /// No more seeded faults from now on.
    pub fn stop_faults(&self) {
        self.random.faulting.store(false, Ordering::Relaxed);
    }

    /// The seeded faults injected so far, by name.
    pub fn injected(&self) -> HashMap<&'static str, u64> {
        self.random.injected.lock().unwrap().clone()
    }

    /// Connections the proxy opened to the server so far.
    pub fn connections(&self) -> u64 {
        self.random.connections.load(Ordering::Relaxed)
    }
}

impl Random {
    /// The fault drawn for a statement, if any.
    fn draw(&self, rng: &mut Rng) -> Option<&'static str> {
        let faults = self.faults?;
        if !self.faulting.load(Ordering::Relaxed) {
            return None;
        }
        let roll = rng.next() % 10_000;
        let mut upto = 0;
        for (name, rate) in [
            (CUT_BEFORE, faults.cut_before),
            (ANSWER_LOST, faults.answer_lost),
            (SLOW, faults.slow),
        ] {
            upto += rate;
            if roll < upto {
                *self.injected.lock().unwrap().entry(name).or_default() += 1;
                return Some(name);
            }
        }
        None
    }
}

/// Whether a client's write starts a statement: a Query, Parse or Bind message (the startup
/// message, a password, a Sync alone are left alone).
fn starts_statement(chunk: &[u8]) -> bool {
    matches!(chunk.first(), Some(b'Q' | b'P' | b'B'))
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    armed: Armed,
    cuts: Arc<AtomicUsize>,
    random: Arc<Random>,
    mut rng: Rng,
) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let cut = Arc::new(AtomicBool::new(false));
    // The next answer's delay, in ms (0: none).
    let delay_ms = Arc::new(AtomicU64::new(0));
    let answer_dropped = Arc::new(tokio::sync::Notify::new());
    let up = {
        let (cut, answer_dropped, delay_ms) =
            (cut.clone(), answer_dropped.clone(), delay_ms.clone());
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match from_client.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                let hit = {
                    let mut armed = armed.lock().unwrap();
                    match *armed {
                        Some((marker, how))
                            if chunk.windows(marker.len()).any(|w| w == marker.as_bytes()) =>
                        {
                            *armed = None;
                            Some(how)
                        }
                        _ => None,
                    }
                };
                let drawn = match hit {
                    None if starts_statement(chunk) => random.draw(&mut rng),
                    _ => None,
                };
                match (hit, drawn) {
                    (Some(Cut::HalfStatement), _) => {
                        let _ = to_server.write_all(&chunk[..n / 2]).await;
                        cuts.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    (_, Some(CUT_BEFORE)) => return,
                    (Some(Cut::DropAnswer), _) | (_, Some(ANSWER_LOST)) => {
                        cut.store(true, Ordering::SeqCst);
                        let _ = to_server.write_all(chunk).await;
                        // Until the server's answer came (and went nowhere), or a while.
                        let _ =
                            tokio::time::timeout(Duration::from_secs(3), answer_dropped.notified())
                                .await;
                        if hit.is_some() {
                            cuts.fetch_add(1, Ordering::SeqCst);
                        }
                        return;
                    }
                    (_, Some(SLOW)) => {
                        delay_ms.store(300 + rng.next() % 500, Ordering::SeqCst);
                        if to_server.write_all(chunk).await.is_err() {
                            return;
                        }
                    }
                    _ => {
                        if to_server.write_all(chunk).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if cut.load(Ordering::SeqCst) {
                // ReadyForQuery: the statement's implicit transaction has ended (committed).
                if buf[..n].windows(5).any(|w| w == [b'Z', 0, 0, 0, 5]) {
                    answer_dropped.notify_one();
                    std::future::pending::<()>().await;
                }
                continue;
            }
            let delay = delay_ms.swap(0, Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if to_client.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}
