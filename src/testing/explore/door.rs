//! The side door: the explorer's Slack as a bot's own HTTP client reaches it. A bot that calls
//! Slack around slack-once's client (its own `reqwest`, `hyper`, `ureq`…) takes the Web API's
//! base from [`crate::slack::api_url`], as it takes it from `SLACK_API_URL` in production;
//! during an exploration that base is this server, on 127.0.0.1, one for the whole test
//! process, each schedule under a path of its own. Every call that comes in is in the trace,
//! and a write breaks an invariant that names it: "a Slack call that is not a step of the
//! journal". It is still made (in the schedule's Slack), as Slack would make it.
//!
//! The schedule runs on virtual time that jumps ahead whenever its runtime has nothing to do,
//! and a call on a real socket leaves it with nothing to do: while a bot may be using the door
//! (from the moment it asks for the base until the door has been quiet for a moment), a
//! blocking task holds the virtual clock still, as tokio does for every blocking task.

use std::collections::HashMap;
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

/// The door: its address and the schedules it serves.
struct Door {
    port: u16,
    worlds: Mutex<HashMap<u64, Weak<World>>>,
    /// Per schedule: calls still being answered, and when the last one came or ended.
    activity: Mutex<HashMap<u64, (usize, Instant)>>,
    next: Mutex<u64>,
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
            worlds: Mutex::new(HashMap::new()),
            activity: Mutex::new(HashMap::new()),
            next: Mutex::new(1),
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

/// The Web API base the schedule running on this thread gives a bot's own client, if one is
/// running; the virtual clock is held while the bot may be using it.
pub(crate) fn url() -> Option<String> {
    let world = super::world::current::get()?;
    let door = door()?;
    let id = *world.door_id.get_or_init(|| {
        let mut next = lock(&door.next);
        let id = *next;
        *next += 1;
        lock(&door.worlds).insert(id, Arc::downgrade(&world));
        id
    });
    let run = RUN.try_with(|r| *r).unwrap_or(0);
    lock(&door.activity).insert(id, (0, Instant::now()));
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let door = door.clone();
        // Holds the virtual clock while the door may be in use: until it has been quiet for
        // 50 ms (real time), at most 5 s.
        drop(runtime.spawn_blocking(move || {
            let started = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(5));
                let (busy, last) = lock(&door.activity)
                    .get(&id)
                    .copied()
                    .unwrap_or((0, started));
                let quiet = busy == 0 && last.elapsed() >= Duration::from_millis(50);
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
    if let (Some(id), Some(Some(door))) = (world.door_id.get(), DOOR.get()) {
        lock(&door.worlds).remove(id);
        lock(&door.activity).remove(id);
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
    let world = lock(&door.worlds).get(&world_id).and_then(Weak::upgrade);
    let Some(world) = world else {
        return Response::builder()
            .status(404)
            .body(Body::from("no exploration runs under this path"))
            .expect("a response");
    };
    lock(&door.activity)
        .entry(world_id)
        .and_modify(|a| {
            a.0 += 1;
            a.1 = Instant::now();
        })
        .or_insert((1, Instant::now()));
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
        world.lock().origins.writes.push((request, method, args));
    }
    lock(&door.activity).entry(world_id).and_modify(|a| {
        a.0 = a.0.saturating_sub(1);
        a.1 = Instant::now();
    });
    response
}
