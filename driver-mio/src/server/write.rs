//! A connection's write path: the current transmit's head and body in one vectored
//! write, a zero-copy block's file with `sendfile(2)`, within the turn's byte budget, and
//! the acknowledgement of each transmit fully written.

use std::io::{self, IoSlice, Write as _};

use peerblock_common::store::OpenBlock;
use peerblock_core::time::Instant;
use peerblock_core::transmit::{Close, Transmit};

use super::conn::ServerConn;
use crate::worker::{Key, Worker};

/// A response being written: the transmit, how many of its head and body bytes are
/// written, and for a zero-copy block its file and how much of it is sent.
pub(super) struct Outgoing {
    pub(super) tx: Transmit,
    pub(super) written: usize,
    pub(super) file: Option<OpenBlock>,
    pub(super) sent: u64,
}

impl ServerConn {
    /// Writes the current transmit as far as the socket and the budget allow: head and
    /// body in one vectored write, then a zero-copy block's file with `sendfile`. Each
    /// transmit fully written is acknowledged and the next one taken. `Ok(false)`: the
    /// budget ran out with bytes still to write and the socket still writable.
    pub(super) fn write(
        &mut self,
        w: &mut Worker,
        key: Key,
        budget: &mut usize,
    ) -> io::Result<bool> {
        loop {
            let Some(out) = &mut self.out else {
                return Ok(true);
            };
            if !self.writable {
                return Ok(true);
            }
            if *budget == 0 {
                return Ok(false);
            }
            let head = &out.tx.head;
            let body = &out.tx.body;
            let buffered = head.len() + body.len();
            let external = out.tx.external.map_or(0, |e| e.len);
            let step = if out.written < buffered {
                let r = if out.written < head.len() {
                    let slices = [IoSlice::new(&head[out.written..]), IoSlice::new(body)];
                    self.stream.write_vectored(&slices)
                } else {
                    let start = out.written - head.len();
                    let end = body.len().min(start + *budget);
                    self.stream.write(&body[start..end])
                };
                r.inspect(|&n| out.written += n)
            } else if out.sent < external {
                let Some(file) = &out.file else {
                    return Err(io::Error::other("a zero-copy response lost its file"));
                };
                let want = ((external - out.sent) as usize).min(*budget);
                let mut offset = out.sent;
                match rustix::fs::sendfile(&self.stream, &file.file, Some(&mut offset), want) {
                    Ok(0) => {
                        // The file shrank under us: the response cannot be completed.
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "block file shorter than its Content-Length",
                        ));
                    }
                    Ok(n) => {
                        out.sent += n as u64;
                        self.shared.metrics.sendfile_bytes.inc_by(n as u64);
                        Ok(n)
                    }
                    Err(e) => Err(io::Error::from(e)),
                }
            } else {
                let Some(Outgoing { tx, .. }) = self.out.take() else {
                    return Ok(true);
                };
                let now = w.now();
                self.transmitted(now, tx)?;
                self.pump(w, key, now);
                continue;
            };
            match step {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => *budget = budget.saturating_sub(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// One transmit is fully written: acknowledge it, count it, act on its `close`.
    pub(super) fn transmitted(&mut self, now: Instant, tx: Transmit) -> io::Result<()> {
        {
            let mut admission = self.shared.admission();
            self.machine.handle_transmitted(now, &mut admission);
        }
        let metrics = &self.shared.metrics;
        let body = tx.body.len() as u64 + tx.external.map_or(0, |e| e.len);
        metrics.inflight_bytes.dec_by(body as i64);
        if let Some(status) = tx.status {
            metrics.response(status);
        }
        if tx.block {
            metrics.bytes_served.inc_by(body);
        }
        tracing::trace!(peer = %self.peer, status = ?tx.status, body, close = ?tx.close, "response written");
        match tx.close {
            Close::KeepOpen => {}
            // Both end our sending side now; `AfterWrite` has finished the machine, and a
            // lingering one keeps reading (discarded) until EOF or its linger deadline.
            Close::AfterWrite | Close::Linger => {
                if let Err(e) = self.stream.shutdown(std::net::Shutdown::Write) {
                    if e.kind() != io::ErrorKind::NotConnected {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }
}
