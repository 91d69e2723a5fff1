//! The soak's fleet: the processes that serve Slack, each a slot that is killed and restarted
//! (some of them), rolled onto the new version once (all of them), and measured (memory,
//! what they print).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::helpers::{BotProcess, Spawn};

/// A slot as the fleet starts it: its name, role, whether the chaos may kill it, its
/// variables.
pub type SlotSpec = (&'static str, Role, bool, Vec<(&'static str, String)>);

/// Which build a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The bot built on the previous release of slack-once.
    Previous,
    /// The bot built on this one.
    Current,
}

/// What a slot does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    SyncIngress,
    DeferredIngress,
    Worker,
}

pub struct Slot {
    pub name: &'static str,
    pub role: Role,
    /// Whether the chaos may SIGKILL it (the others live from the deploy to the end: their
    /// memory is the one measured for flatness).
    pub killable: bool,
    vars: Vec<(&'static str, String)>,
    version: Version,
    process: Option<BotProcess>,
    /// When its process started.
    since: Instant,
}

/// One memory sample: the slot, its version, how long its process had run, and its RSS.
#[derive(Clone, Debug)]
pub struct RssSample {
    pub slot: &'static str,
    pub version: Version,
    pub pid: u32,
    pub age: Duration,
    pub kib: u64,
}

pub struct Fleet {
    slots: Mutex<Vec<Slot>>,
    previous: PathBuf,
    current: PathBuf,
    pub kills: AtomicU64,
    pub starts: AtomicU64,
    /// Starts that failed (and were tried again).
    pub failed_starts: AtomicU64,
    pub rss: Mutex<Vec<RssSample>>,
    /// What the processes that ended printed: bytes, lines, metric lines.
    printed: Mutex<(u64, u64, u64)>,
    /// CPU time the processes that ended used, in clock ticks.
    cpu_ticks: AtomicU64,
}

/// A live process's CPU time (user and system), in clock ticks, from `/proc`.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0)
}

/// Lines of each process's log kept in memory (the counts cover all of them).
const KEEP_LINES: usize = 400;

impl Fleet {
    /// The fleet, every slot started on `Version::Previous`.
    pub fn start(previous: PathBuf, current: PathBuf, slots: Vec<SlotSpec>) -> Self {
        let fleet = Self {
            slots: Mutex::new(Vec::new()),
            previous,
            current,
            kills: AtomicU64::new(0),
            starts: AtomicU64::new(0),
            failed_starts: AtomicU64::new(0),
            rss: Mutex::new(Vec::new()),
            printed: Mutex::new((0, 0, 0)),
            cpu_ticks: AtomicU64::new(0),
        };
        for (name, role, killable, vars) in slots {
            let process = fleet.spawn(role, Version::Previous, &vars);
            fleet.slots.lock().unwrap().push(Slot {
                name,
                role,
                killable,
                vars,
                version: Version::Previous,
                process: Some(process),
                since: Instant::now(),
            });
        }
        fleet
    }

    fn spawn(&self, role: Role, version: Version, vars: &[(&'static str, String)]) -> BotProcess {
        let program = match version {
            Version::Previous => &self.previous,
            Version::Current => &self.current,
        };
        let args: &[&str] = match role {
            Role::Worker => &["worker"],
            _ => &[],
        };
        let how = Spawn {
            keep_lines: KEEP_LINES,
            signing_secret_env: false,
        };
        // A start that fails (its secret not read in time under load) is tried again, as
        // Lambda starts another environment after a failed init.
        let mut failures = Vec::new();
        loop {
            self.starts.fetch_add(1, Ordering::Relaxed);
            match BotProcess::try_spawn_program_with(program, args, vars, &how) {
                Ok(process) => return process,
                Err(error) if failures.len() < 2 => {
                    eprintln!("soak: a {role:?} did not start; trying again: {error}");
                    self.failed_starts.fetch_add(1, Ordering::Relaxed);
                    failures.push(error);
                }
                Err(error) => panic!("a {role:?} did not start three times: {error}"),
            }
        }
    }

    /// The events URL of a slot of `role` (the `pick`-th of them, modulo), or a closed port
    /// while it restarts (Slack counts the delivery failed).
    pub fn url(&self, role: Role, pick: usize) -> (String, Version) {
        let slots = self.slots.lock().unwrap();
        let of_role: Vec<&Slot> = slots.iter().filter(|s| s.role == role).collect();
        let slot = of_role[pick % of_role.len()];
        let url = slot
            .process
            .as_ref()
            .map(BotProcess::url)
            .unwrap_or_else(|| "http://127.0.0.1:9/slack/events".into());
        (url, slot.version)
    }

    fn retire(&self, process: BotProcess) {
        self.cpu_ticks
            .fetch_add(cpu_ticks(process.child.id()), Ordering::Relaxed);
        let (bytes, lines, metrics) = process.printed();
        let mut printed = self.printed.lock().unwrap();
        printed.0 += bytes;
        printed.1 += lines;
        printed.2 += metrics;
        drop(process);
    }

    /// How many slots the chaos may kill.
    pub fn killable(&self) -> Vec<usize> {
        let slots = self.slots.lock().unwrap();
        (0..slots.len()).filter(|&i| slots[i].killable).collect()
    }

    /// SIGKILLs slot `slot`'s process (no cleanup, as when an instance dies) and restarts it
    /// on its version 300 ms later.
    pub async fn kill_and_restart(self: &Arc<Self>, slot: usize) {
        let (role, version, vars, process) = {
            let mut slots = self.slots.lock().unwrap();
            let s = &mut slots[slot];
            (s.role, s.version, s.vars.clone(), s.process.take())
        };
        if let Some(mut p) = process {
            // Its CPU time while /proc still has it (a reaped process's is gone).
            self.cpu_ticks
                .fetch_add(cpu_ticks(p.child.id()), Ordering::Relaxed);
            p.kill();
            self.retire(p);
        }
        self.kills.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let fleet = self.clone();
        let process = tokio::task::spawn_blocking(move || fleet.spawn(role, version, &vars))
            .await
            .unwrap();
        let mut slots = self.slots.lock().unwrap();
        if slots[slot].version != version || slots[slot].process.is_some() {
            // The deploy replaced the slot meanwhile: its process stays.
            drop(slots);
            self.retire(process);
            return;
        }
        slots[slot].process = Some(process);
        slots[slot].since = Instant::now();
    }

    /// The rolling deploy: each slot in turn, `step` apart, gets a process of the current
    /// version; once it serves, the slot's old process is sent SIGTERM and finishes what it
    /// holds (as Lambda lets an old version's invocations finish). Meanwhile both versions
    /// serve the same table and queue.
    pub async fn roll(self: &Arc<Self>, step: Duration) {
        let count = self.slots.lock().unwrap().len();
        for slot in 0..count {
            let (role, vars) = {
                let slots = self.slots.lock().unwrap();
                (slots[slot].role, slots[slot].vars.clone())
            };
            let fleet = self.clone();
            let new =
                tokio::task::spawn_blocking(move || fleet.spawn(role, Version::Current, &vars))
                    .await
                    .unwrap();
            let old = {
                let mut slots = self.slots.lock().unwrap();
                let s = &mut slots[slot];
                s.version = Version::Current;
                s.since = Instant::now();
                s.process.replace(new)
            };
            if let Some(old) = old {
                sigterm(old.child.id());
                let fleet = self.clone();
                tokio::spawn(async move {
                    let pid = old.child.id();
                    let waited = tokio::task::spawn_blocking(move || {
                        let mut old = old;
                        let deadline = Instant::now() + Duration::from_secs(15);
                        // Its CPU time, read until it is reaped (a zombie's is still there).
                        let mut ticks = 0;
                        while Instant::now() < deadline {
                            ticks = ticks.max(cpu_ticks(pid));
                            if let Ok(Some(_)) = old.child.try_wait() {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        (old, ticks)
                    })
                    .await;
                    match waited {
                        Ok((old, ticks)) => {
                            fleet.cpu_ticks.fetch_add(ticks, Ordering::Relaxed);
                            fleet.retire(old);
                        }
                        Err(_) => eprintln!("soak: the old process {pid} could not be waited for"),
                    }
                });
            }
            tokio::time::sleep(step).await;
        }
    }

    /// Samples every process's resident memory (`VmRSS`).
    pub fn sample_rss(&self) {
        let slots = self.slots.lock().unwrap();
        let mut rss = self.rss.lock().unwrap();
        for s in slots.iter() {
            let Some(p) = &s.process else { continue };
            let pid = p.child.id();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            if let Some(kib) = status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
            {
                rss.push(RssSample {
                    slot: s.name,
                    version: s.version,
                    pid,
                    age: s.since.elapsed(),
                    kib,
                });
            }
        }
    }

    /// Bytes, lines and metric lines printed by every process so far.
    pub fn printed(&self) -> (u64, u64, u64) {
        let mut total = *self.printed.lock().unwrap();
        for s in self.slots.lock().unwrap().iter() {
            if let Some(p) = &s.process {
                let (b, l, m) = p.printed();
                total.0 += b;
                total.1 += l;
                total.2 += m;
            }
        }
        total
    }

    /// CPU seconds every process used so far (those still running, and those that ended).
    pub fn cpu_seconds(&self) -> f64 {
        let mut ticks = self.cpu_ticks.load(Ordering::Relaxed);
        for s in self.slots.lock().unwrap().iter() {
            if let Some(p) = &s.process {
                ticks += cpu_ticks(p.child.id());
            }
        }
        ticks as f64 / 100.0
    }

    /// The slots' names and versions now.
    pub fn versions(&self) -> Vec<(&'static str, Version)> {
        self.slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| (s.name, s.version))
            .collect()
    }

    /// Stops every process (SIGTERM, then what is left at drop: SIGKILL).
    pub fn stop(&self) {
        let mut slots = self.slots.lock().unwrap();
        for s in slots.iter_mut() {
            if let Some(p) = s.process.take() {
                self.cpu_ticks
                    .fetch_add(cpu_ticks(p.child.id()), Ordering::Relaxed);
                sigterm(p.child.id());
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut p = p;
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = p.child.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let (b, l, m) = p.printed();
                let mut printed = self.printed.lock().unwrap();
                printed.0 += b;
                printed.1 += l;
                printed.2 += m;
            }
        }
    }
}

/// SIGTERM, as Lambda or a process manager sends it: the process finishes what it holds and
/// exits. A process already gone is no error.
fn sigterm(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}
