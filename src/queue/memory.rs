//! An in-memory queue with SQS's visibility semantics, for tests of the worker: a received
//! message is hidden for its visibility timeout and comes back unless deleted; after
//! `max_receives` receives it moves to the dead-letter list.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

#[cfg(test)]
use super::MAX_MESSAGE_BYTES;
use super::{QueueError, Received, WorkQueue, refuse_too_large};

#[derive(Clone, Debug)]
struct Message {
    id: u64,
    body: String,
    receives: u32,
    visible_at: Instant,
    receipt: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    messages: VecDeque<Message>,
    dead: Vec<String>,
}

/// A [`WorkQueue`] in this process's memory, with SQS's visibility semantics (see the
/// module's documentation).
#[derive(Debug)]
pub struct MemoryQueue {
    state: Mutex<State>,
    max_receives: u32,
}

impl MemoryQueue {
    /// An empty queue whose messages go to the dead-letter list after `max_receives` receives.
    pub fn new(max_receives: u32) -> Self {
        Self {
            state: Mutex::default(),
            max_receives,
        }
    }

    /// Messages not deleted yet (visible or not).
    pub fn len(&self) -> usize {
        self.state.lock().expect("queue lock").messages.len()
    }

    /// Whether no message is left, visible or not.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bodies moved to the dead-letter list.
    pub fn dead_letters(&self) -> Vec<String> {
        self.state.lock().expect("queue lock").dead.clone()
    }
}

#[async_trait]
impl WorkQueue for MemoryQueue {
    async fn send(&self, body: &str) -> Result<(), QueueError> {
        refuse_too_large(body)?;
        let mut state = self.state.lock().expect("queue lock");
        state.next_id += 1;
        let id = state.next_id;
        state.messages.push_back(Message {
            id,
            body: body.to_string(),
            receives: 0,
            visible_at: Instant::now(),
            receipt: None,
        });
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        _wait: Duration,
    ) -> Result<Vec<Received>, QueueError> {
        let now = Instant::now();
        let mut guard = self.state.lock().expect("queue lock");
        let state = &mut *guard;
        let max_receives = self.max_receives;
        // As SQS: a message received max_receives times and visible again goes to the DLQ.
        let (dead, alive): (Vec<Message>, Vec<Message>) = state
            .messages
            .drain(..)
            .partition(|m| m.visible_at <= now && m.receives >= max_receives);
        state.dead.extend(dead.into_iter().map(|m| m.body));
        state.messages = alive.into();
        let mut out = Vec::new();
        for m in state.messages.iter_mut() {
            if out.len() >= max {
                break;
            }
            if m.visible_at <= now {
                m.receives += 1;
                m.visible_at = now + visibility;
                let receipt = format!("{}-{}", m.id, m.receives);
                m.receipt = Some(receipt.clone());
                out.push(Received {
                    message_id: m.id.to_string(),
                    receipt_handle: receipt,
                    body: m.body.clone(),
                    receive_count: m.receives,
                });
            }
        }
        Ok(out)
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut state = self.state.lock().expect("queue lock");
        state
            .messages
            .retain(|m| m.receipt.as_deref() != Some(receipt_handle));
        Ok(())
    }

    async fn change_visibility(
        &self,
        receipt_handle: &str,
        after: Duration,
    ) -> Result<(), QueueError> {
        let mut state = self.state.lock().expect("queue lock");
        if let Some(m) = state
            .messages
            .iter_mut()
            .find(|m| m.receipt.as_deref() == Some(receipt_handle))
        {
            m.visible_at = Instant::now() + after;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_message_not_deleted_comes_back_and_then_goes_to_the_dead_letters() {
        let q = MemoryQueue::new(2);
        q.send("m").await.unwrap();
        let vis = Duration::from_secs(5);
        let first = q.receive(10, vis, Duration::ZERO).await.unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].receive_count, 1);
        assert!(q.receive(10, vis, Duration::ZERO).await.unwrap().is_empty());
        tokio::time::advance(vis).await;
        let second = q.receive(10, vis, Duration::ZERO).await.unwrap();
        assert_eq!(second[0].receive_count, 2);
        tokio::time::advance(vis).await;
        assert!(q.receive(10, vis, Duration::ZERO).await.unwrap().is_empty());
        assert_eq!(q.dead_letters(), ["m"]);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_whose_visibility_is_changed_comes_back_then_and_counts_its_receives() {
        let q = MemoryQueue::new(5);
        q.send("m").await.unwrap();
        let vis = Duration::from_secs(600);
        let first = q.receive(10, vis, Duration::ZERO).await.unwrap();
        q.change_visibility(&first[0].receipt_handle, Duration::from_secs(10))
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(q.receive(10, vis, Duration::ZERO).await.unwrap().is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        let second = q.receive(10, vis, Duration::ZERO).await.unwrap();
        assert_eq!(second[0].receive_count, 2);
    }

    #[tokio::test]
    async fn a_deleted_message_is_gone_and_an_oversized_one_refused() {
        let q = MemoryQueue::new(5);
        q.send("m").await.unwrap();
        let got = q
            .receive(10, Duration::from_secs(5), Duration::ZERO)
            .await
            .unwrap();
        q.delete(&got[0].receipt_handle).await.unwrap();
        assert!(q.is_empty());
        let big = "x".repeat(MAX_MESSAGE_BYTES + 1);
        assert!(matches!(
            q.send(&big).await,
            Err(QueueError::TooLarge { .. })
        ));
    }
}
