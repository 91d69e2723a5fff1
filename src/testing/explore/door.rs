//! The side door: the explorer's Slack as a bot's own HTTP client reaches it. A bot that calls
//! Slack around slack-once's client (its own `reqwest`, `hyper`, `ureq`…) takes the Web API's
//! base from [`crate::slack::api_url`], as it takes it from `SLACK_API_URL` in production;
//! during an exploration that base is this server, on 127.0.0.1, one server for the whole test
//! process, each schedule under a path of its own (a `TestBot`'s request gets its own
//! stand-in's base instead, whatever explorations run beside it). Every call that comes in is in the trace,
//! and a write breaks an invariant that names it: "a Slack call that is not a step of the
//! journal". It is still made (in the schedule's Slack), as Slack would make it.
//!
//! The schedule runs on virtual time that jumps ahead whenever its runtime has nothing to do,
//! and a call on a real socket leaves it with nothing to do: while a bot may be using the door
//! (from the moment it asks for the base until the door has been quiet for a moment), a
//! blocking task holds the virtual clock still, as tokio does for every blocking task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::routing::any;
use http::{HeaderMap, Response};
use serde_json::Value;
use tower::ServiceExt;

use super::world::{RUN, World};

/// The door: its address, and per schedule the calls still being answered and when the last
/// one came or ended.
struct Door {
    port: u16,
    activity: Mutex<HashMap<u64, Activity>>,
}

/// A schedule's use of the door.
#[derive(Clone, Copy)]
struct Activity {
    /// Bases given out that no call has come under yet (a base is taken to call).
    pending: usize,
    /// Calls being answered.
    busy: usize,
    /// When the last base was given, or a call came or was answered.
    last: Instant,
}

impl Activity {
    fn new() -> Self {
        Self {
            pending: 0,
            busy: 0,
            last: Instant::now(),
        }
    }
}

/// Every schedule running in this process, by its id (its runtime's threads are named after
/// it, so that a blocking task of the bot's finds it too).
static WORLDS: OnceLock<Mutex<HashMap<u64, Weak<World>>>> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(1);
/// Explorations running in this process: while any is, [`url`] never gives Slack's own base.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Writes through the door that no running schedule knows: (when, the exploration whose
/// ended schedule's base it came under, if known, what).
static ORPHANS: Mutex<Vec<(Instant, Option<u64>, String)>> = Mutex::new(Vec::new());
/// The exploration each schedule is of, kept after the schedule ends.
static OWNERS: OnceLock<Mutex<HashMap<u64, u64>>> = OnceLock::new();
static EXPLORATIONS: AtomicU64 = AtomicU64::new(1);

fn owners() -> std::sync::MutexGuard<'static, HashMap<u64, u64>> {
    lock(OWNERS.get_or_init(|| Mutex::new(HashMap::new())))
}
/// The prefix of a schedule's runtime's thread names.
const THREAD: &str = "slack-once-explore-w";
/// How long the door must be quiet (real time) before the virtual clock goes on.
const QUIET: Duration = Duration::from_millis(200);
/// How long (real time) a base given out may wait for its call before the clock goes on.
const FIRST_CALL: Duration = Duration::from_secs(2);

fn worlds() -> std::sync::MutexGuard<'static, HashMap<u64, Weak<World>>> {
    lock(WORLDS.get_or_init(|| Mutex::new(HashMap::new())))
}

/// A new schedule's id, and the name of its runtime's threads.
pub(crate) fn reserve() -> (u64, String) {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    (id, format!("{THREAD}{id}"))
}

/// The schedule `world` (its id reserved) of the exploration `explorer` runs from now on.
pub(crate) fn register(world: &Arc<World>, explorer: u64) {
    if let Some(id) = world.door_id.get() {
        worlds().insert(*id, Arc::downgrade(world));
        owners().insert(*id, explorer);
    }
}

/// An exploration runs while the guard lives: its id.
pub(crate) struct Running(pub(crate) u64);

impl Running {
    pub(crate) fn start() -> Self {
        crate::slack::under_test();
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Running(EXPLORATIONS.fetch_add(1, Ordering::Relaxed))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The writes through the door that no schedule knew and that are `explorer`'s: under a base
/// from one of its ended schedules, or from a thread no schedule knows while it ran (since
/// `since`).
pub(crate) fn orphans_of(explorer: u64, since: Instant) -> Vec<String> {
    lock(&ORPHANS)
        .iter()
        .filter(|(at, owner, _)| match owner {
            Some(owner) => *owner == explorer,
            None => *at >= since,
        })
        .map(|(_, _, what)| what.clone())
        .collect()
}

static DOOR: OnceLock<Option<Arc<Door>>> = OnceLock::new();

/// The door, started on first use (on a thread of its own); `None` if 127.0.0.1 has no port.
fn door() -> Option<Arc<Door>> {
    DOOR.get_or_init(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
        listener.set_nonblocking(true).ok()?;
        let port = listener.local_addr().ok()?.port();
        let door = Arc::new(Door {
            port,
            activity: Mutex::new(HashMap::new()),
        });
        let served = door.clone();
        std::thread::Builder::new()
            .name("slack-once-explorer-door".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the door");
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let router = Router::new()
                        .route("/w/{world}/r/{run}/api/{method}", any(call))
                        .with_state(served);
                    let _ = axum::serve(listener, router).await;
                });
            })
            .ok()?;
        Some(door)
    })
    .clone()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The schedule this thread is part of: the schedule's own thread, or a thread of its runtime
/// (a blocking task of the bot's).
fn this_world() -> Option<Arc<World>> {
    if let Some(world) = super::world::current::get() {
        return Some(world);
    }
    let name = std::thread::current().name()?.to_string();
    let id: u64 = name.strip_prefix(THREAD)?.parse().ok()?;
    worlds().get(&id).and_then(Weak::upgrade)
}

/// The Web API base a bot's own client gets in an exploration: the schedule's at the door,
/// the virtual clock held while the bot may be using it; while an exploration runs and this
/// thread is none of its schedules' (a thread the bot started), the door's base that knows no
/// schedule (its calls are reported by the exploration, never sent to Slack). `None`: no
/// exploration runs.
pub(crate) fn url() -> Option<String> {
    let Some(world) = this_world() else {
        if RUNNING.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let door = door()?;
        return Some(format!("http://127.0.0.1:{}/w/0/r/0/api", door.port));
    };
    let door = door()?;
    let id = *world.door_id.get()?;
    let run = RUN.try_with(|r| *r).unwrap_or(0);
    {
        let mut activity = lock(&door.activity);
        let a = activity.entry(id).or_insert_with(Activity::new);
        a.pending += 1;
        a.last = Instant::now();
    }
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let door = door.clone();
        // Holds the virtual clock while the door may be in use: until the base given has
        // been called under (or FIRST_CALL has passed), no call is being answered, and it has
        // been quiet for QUIET (real time); at most 5 s. Real time under load only lengthens
        // the hold: a call made at once is answered on virtual time that stood still.
        drop(runtime.spawn_blocking(move || {
            let started = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(5));
                let a = lock(&door.activity)
                    .get(&id)
                    .copied()
                    .unwrap_or_else(Activity::new);
                let called = a.pending == 0 || started.elapsed() >= FIRST_CALL;
                let quiet = called && a.busy == 0 && a.last.elapsed() >= QUIET;
                if quiet || started.elapsed() >= Duration::from_secs(5) {
                    return;
                }
            }
        }));
    }
    Some(format!("http://127.0.0.1:{}/w/{id}/r/{run}/api", door.port))
}

/// Forgets a schedule's world.
pub(crate) fn forget(world: &World) {
    if let Some(id) = world.door_id.get() {
        worlds().remove(id);
        if let Some(Some(door)) = DOOR.get() {
            lock(&door.activity).remove(id);
        }
    }
}

/// One call through the door: recorded, judged, made in the schedule's Slack.
async fn call(
    State(door): State<Arc<Door>>,
    Path((world_id, run, method)): Path<(u64, u32, String)>,
    RawQuery(query): RawQuery,
    verb: http::Method,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response<Body> {
    let world = worlds().get(&world_id).and_then(Weak::upgrade);
    let Some(world) = world else {
        // A call no running schedule knows: from a thread the bot started, or under a base
        // kept from a schedule that has ended (a client built once). Never made; reported.
        let why = match world_id {
            0 => {
                "from a thread that is none of a schedule's (one the bot started, or another \
                  test's running beside the exploration outside a TestBot's request)"
            }
            _ => {
                "under a base kept from a schedule that has ended (take it from \
                  slack_once::slack::api_url() for each call)"
            }
        };
        if !crate::slack::is_read_method(&method) {
            let owner = owners().get(&world_id).copied();
            lock(&ORPHANS).push((Instant::now(), owner, format!("{method} {why}")));
        }
        return Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"ok":false,"error":"not_in_any_exploration"}"#,
            ))
            .expect("a response");
    };
    {
        let mut activity = lock(&door.activity);
        let a = activity.entry(world_id).or_insert_with(Activity::new);
        a.pending = a.pending.saturating_sub(1);
        a.busy += 1;
        a.last = Instant::now();
    }
    let mut args = crate::testing::slack::form(query.as_deref().unwrap_or(""));
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(fields)) => args.extend(fields),
        _ => args.extend(crate::testing::slack::form(&String::from_utf8_lossy(&body))),
    }
    let args = Value::Object(args);
    let request = (run > 0).then(|| world.request_of(run));
    let write = !crate::slack::is_read_method(&method);
    let brief = super::check::brief_value(&args);
    world.say(
        (run > 0).then_some(run),
        format!("around slack-once's client: slack {method} {brief}"),
    );
    world
        .lock()
        .by_request
        .around
        .push((request, method.clone(), args.clone()));
    if write {
        world.violate(format!(
            "a Slack call that is not a step of the journal: {method} {brief}, made {} with a \
             client of the bot's own (made again on every retry and takeover, and never \
             looked for): make it through ctx (ctx.post, ctx.call…)",
            match run {
                0 => "outside any run".to_string(),
                r => format!("by run {r}"),
            }
        ));
    }
    // Made in the schedule's Slack, as Slack would make it.
    let before = write.then(|| world.shown());
    let mut forwarded = http::Request::builder().method(verb).uri(match &query {
        Some(q) => format!("/api/{method}?{q}"),
        None => format!("/api/{method}"),
    });
    for (name, value) in &headers {
        forwarded = forwarded.header(name, value);
    }
    let forwarded = forwarded.body(Body::from(body)).expect("a valid request");
    let response = world
        .slack
        .router()
        .oneshot(forwarded)
        .await
        .unwrap_or_else(|e| match e {});
    if let (Some(before), Some(request)) = (before, request) {
        world.made_by(request, &before);
        world
            .lock()
            .by_request
            .origins
            .writes
            .push((request, method, args));
    }
    if let Some(a) = lock(&door.activity).get_mut(&world_id) {
        a.busy = a.busy.saturating_sub(1);
        a.last = Instant::now();
    }
    response
}
