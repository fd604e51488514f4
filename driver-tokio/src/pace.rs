//! Upload pacing in the tokio server: core's token buckets (`peerblock_core::pace`)
//! applied to the server's socket writes.
//!
//! A node's [`UploadPacing`] holds its one shared bucket (`[listener]
//! upload_bytes_per_second`) and the per-connection ceiling (`[listener]
//! connection_upload_bytes_per_second`). Each connection gets a `ConnPace`: before a
//! write it asks for the bytes it wants to write, writes at most the grant, refunds what
//! the socket did not take, and when told to wait it stops asking for writability until
//! its pacing timer fires. Core decides how much and until when; this module only keeps
//! the lock and the timer.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use peerblock_core::pace::{take_both, Grant, PaceConfig, PaceConfigError, TokenBucket};
use peerblock_core::time::{Clock, Instant};
use tokio::time::Sleep;

/// A node's upload pacing: off, or a shared budget and/or a per-connection ceiling.
#[derive(Clone, Default)]
pub struct UploadPacing {
    node: Option<Arc<Mutex<TokenBucket>>>,
    per_connection: Option<PaceConfig>,
}

impl std::fmt::Debug for UploadPacing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let node = self
            .node
            .as_ref()
            .map(|b| *b.lock().unwrap_or_else(PoisonError::into_inner).config());
        f.debug_struct("UploadPacing")
            .field("node", &node)
            .field("per_connection", &self.per_connection)
            .finish()
    }
}

impl UploadPacing {
    /// No pacing (the default).
    pub fn off() -> Self {
        UploadPacing::default()
    }

    /// Pacing with a node-wide budget and/or a per-connection ceiling (each validated),
    /// the node's bucket full at `now`.
    pub fn new(
        node: Option<PaceConfig>,
        per_connection: Option<PaceConfig>,
        now: Instant,
    ) -> Result<Self, PaceConfigError> {
        if let Some(c) = per_connection {
            c.validate()?;
        }
        let node = match node {
            Some(c) => Some(Arc::new(Mutex::new(TokenBucket::new(c, now)?))),
            None => None,
        };
        Ok(UploadPacing {
            node,
            per_connection,
        })
    }

    /// Whether anything is paced.
    pub fn is_off(&self) -> bool {
        self.node.is_none() && self.per_connection.is_none()
    }

    /// A new connection's pacing, `None` when pacing is off.
    pub(crate) fn connection(&self, now: Instant) -> Option<ConnPace> {
        if self.is_off() {
            return None;
        }
        let own = self
            .per_connection
            .map(|c| TokenBucket::new(c, now).expect("validated in UploadPacing::new"));
        Some(ConnPace {
            node: self.node.clone(),
            own,
            waiting: false,
            sleep: Box::pin(tokio::time::sleep(std::time::Duration::ZERO)),
        })
    }
}

/// One connection's pacing: its own bucket, the node's, and the timer it waits on.
pub(crate) struct ConnPace {
    node: Option<Arc<Mutex<TokenBucket>>>,
    own: Option<TokenBucket>,
    /// Told to wait; cleared when the timer fires.
    pub(crate) waiting: bool,
    pub(crate) sleep: Pin<Box<Sleep>>,
}

impl ConnPace {
    /// How many of `want` bytes may be written now; `None` = none: the timer is armed at
    /// the instant core named and `waiting` is set.
    pub(crate) fn grant(&mut self, clock: &Clock, now: Instant, want: usize) -> Option<usize> {
        let want64 = want as u64;
        let grant = match (&mut self.own, &self.node) {
            (Some(own), Some(node)) => {
                let mut node = node.lock().unwrap_or_else(PoisonError::into_inner);
                take_both(own, &mut node, now, want64)
            }
            (Some(own), None) => own.take(now, want64),
            (None, Some(node)) => node
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(now, want64),
            (None, None) => Grant::Now(want64),
        };
        match grant {
            Grant::Now(n) => Some(usize::try_from(n).unwrap_or(want).min(want)),
            Grant::Wait(at) => {
                let at = clock.to_std(at).unwrap_or_else(|| {
                    std::time::Instant::now() + std::time::Duration::from_millis(1)
                });
                self.sleep
                    .as_mut()
                    .reset(tokio::time::Instant::from_std(at));
                self.waiting = true;
                None
            }
        }
    }

    /// Gives back `n` granted bytes the socket did not take.
    pub(crate) fn refund(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let n = n as u64;
        if let Some(own) = &mut self.own {
            own.refund(n);
        }
        if let Some(node) = &self.node {
            node.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .refund(n);
        }
    }
}
