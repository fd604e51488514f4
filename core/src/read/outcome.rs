//! What goes into and comes out of a [`Read`](super::Read): GET outcomes in, events (the
//! driver's work orders) and the final [`ReadOutcome`] out.

use bytes::Bytes;

use crate::placement::PeerId;
use crate::time::Duration;

/// Names one GET this read asked for, so its answer (or cancellation) can be matched. Ids
/// are unique within one read and increase in the order the GETs were asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GetId(pub u32);

/// How one GET to one peer ended, as the driver classified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetOutcome {
    /// The peer returned the record, already verified by the driver against the key (a
    /// wrong body is [`GetOutcome::Failed`], not `Found`).
    Found(Bytes),
    /// The peer answered that it does not hold the record.
    NotFound,
    /// The peer is alive but full and declined, optionally saying when to come back. The
    /// driver should also record this in the cooldown table behind its
    /// [`PeerView`](super::PeerView).
    Refused {
        /// The peer's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// The peer answered with a copy that is not the record: the body failed the
    /// driver's validation (wrong length or hash), or the peer said its stored copy is
    /// corrupt (`404` + `X-Peerblock-Miss: corrupt`). The record exists; this peer has no
    /// valid copy. The read never asks this peer for this record again and asks another
    /// holder; the breaker is the driver's business (a failed validation is a soft
    /// failure there, a corrupt-copy answer is not charged).
    Invalid,
    /// No usable answer: dial failure, timeout, reset, malformed response.
    Failed,
}

/// How the optional origin fetch ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OriginOutcome {
    /// The origin returned the record.
    Found(Bytes),
    /// The origin answered that the record does not exist.
    NotFound,
    /// The origin could not be reached or answered with an error.
    Failed,
}

/// The result of a read. Distinct outcomes, each only when it is true.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// A peer returned the record.
    Found(Bytes),
    /// The origin returned the record after the peers could not.
    FoundAtOrigin(Bytes),
    /// Authoritative: a close group's worth of the nearest peers answered `NotFound` and no
    /// possible holder was refusing; with an origin configured
    /// ([`ReadConfig::origin`](super::ReadConfig::origin)), only the origin's own "not
    /// found" (peers' 404s then prove nothing: an origin fetch that fails ends
    /// [`Unavailable`](Self::Unavailable)).
    Absent,
    /// Possible holders were still refusing after the allowed refusal waits: try again
    /// shortly. Never reported as absence.
    Busy,
    /// Not enough holders could be reached (timeouts, dial failures, open circuits, too
    /// few candidates) to prove anything.
    Unavailable,
    /// The record exists but no valid copy could be read: every copy received failed
    /// validation or was reported corrupt by its holder ([`GetOutcome::Invalid`]), and
    /// no other holder had one (after the read's retry). Corruption, never absence: an
    /// operator repairs the holders (or the origin serves the read, when configured).
    Invalid,
    /// The driver cancelled the read ([`Read::cancel`](super::Read::cancel)) before it had
    /// an outcome. Proves nothing about the record.
    Cancelled,
}

impl ReadOutcome {
    /// The outcome's name, as drivers print and count it: `found`, `origin`, `absent`,
    /// `busy`, `unavailable`, `invalid`, `cancelled`.
    pub fn name(&self) -> &'static str {
        match self {
            ReadOutcome::Found(_) => "found",
            ReadOutcome::FoundAtOrigin(_) => "origin",
            ReadOutcome::Absent => "absent",
            ReadOutcome::Busy => "busy",
            ReadOutcome::Unavailable => "unavailable",
            ReadOutcome::Invalid => "invalid",
            ReadOutcome::Cancelled => "cancelled",
        }
    }

    /// The record's bytes, if the read found it anywhere.
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            ReadOutcome::Found(b) | ReadOutcome::FoundAtOrigin(b) => Some(b),
            _ => None,
        }
    }
}

/// What the machine asks its driver to do next (drained with
/// [`Read::poll_event`](super::Read::poll_event)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadEvent {
    /// Start a lookup (discovery) for this read's key. Answer with
    /// [`Read::handle_lookup`](super::Read::handle_lookup) (and, optionally, earlier partial
    /// results with [`Read::handle_lookup_progress`](super::Read::handle_lookup_progress)).
    Lookup,
    /// Send a GET for this read's key to `peer`; answer with
    /// [`Read::handle_get`](super::Read::handle_get) quoting `id`.
    Get {
        /// The GET's id within this read.
        id: GetId,
        /// Where to send it.
        peer: PeerId,
    },
    /// Abandon GET `id`: the read no longer needs its answer (found elsewhere, the GET
    /// outlived its timeout, or the read was cancelled). An answer arriving afterwards is
    /// ignored.
    Cancel {
        /// The GET to abandon.
        id: GetId,
    },
    /// Fetch the record from the configured origin; answer with
    /// [`Read::handle_origin`](super::Read::handle_origin).
    FetchOrigin,
    /// The read is over. Emitted exactly once, last (after the `Cancel`s of any GETs still
    /// in flight).
    Done(ReadOutcome),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_the_records_wherever_it_was_found_and_none_otherwise() {
        let record = Bytes::from_static(b"record");
        assert_eq!(ReadOutcome::Found(record.clone()).bytes(), Some(&record));
        assert_eq!(
            ReadOutcome::FoundAtOrigin(record.clone()).bytes(),
            Some(&record)
        );
        for nothing in [
            ReadOutcome::Absent,
            ReadOutcome::Busy,
            ReadOutcome::Unavailable,
            ReadOutcome::Invalid,
            ReadOutcome::Cancelled,
        ] {
            assert_eq!(nothing.bytes(), None, "{nothing:?}");
        }
    }
}
