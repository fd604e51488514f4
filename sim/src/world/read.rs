//! Downloads and block reads: starting them, driving each core read machine (lookups,
//! GETs, cancels, timers) and recording how they end.

use peerblock_core::read::{LookupPeer, OriginOutcome, Read, ReadEvent, ReadOutcome};
use peerblock_core::rng::indexed_seed;

use super::{ms, Download, Ev, ReadState, World};
use crate::model::content::node_of;
use crate::model::node::Health;
use crate::net::mix;
use crate::slab::Handle;
use crate::trace;

impl World<'_> {
    pub(super) fn start_download(&mut self, reader: u32, round: u32) {
        if !self.s.readers.keep_state_between_rounds && round > 0 {
            self.readers[reader as usize].reset();
        }
        let d = self.downloads.len() as u32;
        self.downloads.push(Download {
            reader,
            round,
            started: self.now,
            next_block: 0,
            active: 0,
            found: 0,
            failed: false,
        });
        self.metrics.downloads_started += 1;
        self.active_downloads[reader as usize] += 1;
        self.metrics.rounds[round as usize].0 += 1;
        trace!(self.trace, self.now, "download", "r={reader} round={round}");
        let first = self.s.readers.parallel_blocks.min(self.s.blocks());
        for _ in 0..first {
            self.next_read(d);
        }
    }

    pub(super) fn next_read(&mut self, d: u32) {
        let dl = &mut self.downloads[d as usize];
        let block = dl.next_block;
        dl.next_block += 1;
        dl.active += 1;
        let reader = dl.reader;
        let seed = indexed_seed(self.reads_seed, self.read_count);
        self.read_count += 1;
        let machine = Read::new(
            self.content.keys[block as usize],
            self.read_config.clone(),
            self.now,
            seed,
        )
        .expect("read config validated with the scenario");
        let h = self.reads.insert(ReadState {
            machine,
            reader,
            download: d,
            block,
            started: self.now,
            gets: Vec::new(),
            first_sent: false,
            opening_sent: 0,
            armed: None,
            lookup_salt: indexed_seed(self.lookup_seed, self.read_count),
        });
        self.metrics.reads_started += 1;
        trace!(self.trace, self.now, "read", "r={reader} b={block}");
        self.drive(h);
    }

    /// Drains the read machine's events and arms its timer.
    pub(super) fn drive(&mut self, h: Handle) {
        loop {
            let event = {
                let Some(rs) = self.reads.get_mut(h) else {
                    return;
                };
                rs.machine
                    .poll_event(self.now, &self.readers[rs.reader as usize])
            };
            match event {
                None => break,
                Some(ReadEvent::Lookup) => self.start_lookup(h),
                Some(ReadEvent::Get { id, peer }) => self.start_get(h, id, node_of(&peer)),
                Some(ReadEvent::Cancel { id }) => self.cancel_get(h, id),
                Some(ReadEvent::FetchOrigin) => {
                    if self.relay.is_some() {
                        // Content at the origin: the read's last resort goes there.
                        let block = self.reads.get(h).map(|rs| rs.block);
                        if let Some(block) = block {
                            self.reader_origin_fetch(h, block);
                        }
                    } else if let Some(rs) = self.reads.get_mut(h) {
                        // No origin configured; answer honestly if one is ever asked.
                        rs.machine.handle_origin(self.now, OriginOutcome::Failed);
                    }
                }
                Some(ReadEvent::Done(outcome)) => {
                    self.finish_read(h, outcome);
                    return;
                }
            }
        }
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        if let Some(deadline) = rs.machine.poll_timeout() {
            let t = deadline.at.max(self.now);
            if rs.armed.is_none_or(|a| t < a || a < self.now) {
                rs.armed = Some(t);
                self.queue.push(t, Ev::ReadTimer { read: h });
            }
        }
    }

    /// GET `g`'s response has started arriving at its reader (the modelled path's first
    /// byte, the HTTP path's first response bytes): progress for the read's hedge rule.
    pub(super) fn get_progress(&mut self, g: Handle) {
        let Some(get) = self.gets.get(g) else {
            return;
        };
        let (h, id) = (get.read, get.id);
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        rs.machine.handle_get_progress(self.now, id);
        self.drive(h);
    }

    pub(super) fn read_timer(&mut self, h: Handle) {
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        if rs.armed == Some(self.now) {
            rs.armed = None;
        }
        rs.machine.handle_timeout(self.now);
        self.drive(h);
    }

    pub(super) fn start_lookup(&mut self, h: Handle) {
        let Some(rs) = self.reads.get(h) else {
            return;
        };
        let nearest = self.content.order[rs.block as usize][0];
        let rtt = self.latency.one_way(rs.reader, nearest) * 2;
        let at = self.now + rtt * self.s.client.lookup_rtts;
        self.queue.push(at, Ev::LookupDone { read: h });
    }

    pub(super) fn lookup_done(&mut self, h: Handle) {
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        let salt = rs.lookup_salt;
        rs.lookup_salt = mix(salt);
        let reader = &self.readers[rs.reader as usize];
        let want = self.s.client.lookup_peers as usize;
        let skip = self.s.client.discovery_skips_suppressed;
        // A miss is a pure function of (this lookup, node): no shared stream to perturb.
        let miss = (self.s.client.lookup_miss * (1u64 << 53) as f64) as u64;
        let hints = self.s.client.lookup_load_hints;
        let block = rs.block;
        let walked;
        let order: &[u32] = match &self.routing {
            None => &self.content.order[block as usize],
            Some(routing) => {
                let nodes = &self.nodes;
                let answers = |n: u32| {
                    nodes[n as usize].reachable() && nodes[n as usize].health == Health::Up
                };
                walked = routing.lookup(
                    rs.reader,
                    &self.content.keys[block as usize],
                    &self.content.ids,
                    self.s.client.lookup_rtts,
                    &answers,
                );
                &walked
            }
        };
        let peers: Vec<LookupPeer> = order
            .iter()
            .filter(|&&n| miss == 0 || mix(salt ^ u64::from(n)) >> 11 >= miss)
            .map(|&n| (n, self.content.ids[n as usize]))
            .filter(|(_, id)| !skip || !reader.peers.cooldowns().is_suppressed(self.now, id))
            .take(want)
            .map(|(n, id)| {
                // Only a node the reader's lookup reached directly answers for itself; a
                // NAT'd, partitioned, crashed or silent node is found through others'
                // routing tables and carries no hint.
                let node = &self.nodes[n as usize];
                let answers = node.reachable() && node.health == Health::Up;
                match hints && answers {
                    true => LookupPeer::with_key_load(id, node.keys.count(self.now, &block)),
                    false => LookupPeer::new(id),
                }
            })
            .collect();
        let (r, b) = (rs.reader, rs.block);
        trace!(
            self.trace,
            self.now,
            "lookup",
            "r={r} b={b} peers={}",
            peers.len()
        );
        if let Some(rs) = self.reads.get_mut(h) {
            rs.machine.handle_lookup_peers(self.now, &peers);
        }
        self.drive(h);
    }

    pub(super) fn finish_read(&mut self, h: Handle, outcome: ReadOutcome) {
        let Some(rs) = self.reads.remove(h) else {
            return;
        };
        let m = &mut self.metrics;
        m.read_ns.push((self.now - rs.started).as_nanos() as u64);
        let ok = match &outcome {
            ReadOutcome::Found(bytes) | ReadOutcome::FoundAtOrigin(bytes) => {
                if *bytes == self.content.token(rs.block) {
                    m.reads_found += 1;
                    true
                } else {
                    m.wrong_bytes += 1;
                    false
                }
            }
            ReadOutcome::Absent => {
                m.reads_absent += 1;
                // Every block of the file is stored on its close group, so any absence
                // report is false.
                m.reads_false_absent += 1;
                m.reads_false_not_found += 1;
                false
            }
            ReadOutcome::Busy => {
                m.reads_busy += 1;
                false
            }
            // The simulator never cancels a read; counted as a failure if it ever does.
            ReadOutcome::Cancelled => false,
            ReadOutcome::Invalid => {
                // Only `corrupt` faults serve wrong bytes: every copy the read got was
                // one of theirs. Told to the user as corrupt, never as "not found".
                m.reads_invalid += 1;
                false
            }
            ReadOutcome::Unavailable => {
                m.reads_unavailable += 1;
                if self.s.client.reports_unavailable_as_not_found {
                    // The reference's read returns Ok(None) for every failure: the user
                    // is told "record not found" for a block the cluster holds.
                    m.reads_false_not_found += 1;
                }
                false
            }
        };
        let name = outcome.name();
        trace!(
            self.trace,
            self.now,
            "done",
            "r={} b={} out={name} ms={:.3}",
            rs.reader,
            rs.block,
            ms(self.now - rs.started)
        );
        let d = rs.download;
        let blocks = self.s.blocks();
        let dl = &mut self.downloads[d as usize];
        dl.active -= 1;
        if ok {
            dl.found += 1;
        } else {
            dl.failed = true;
        }
        if !dl.failed && dl.next_block < blocks {
            self.next_read(d);
        } else if dl.active == 0 {
            let dl = &self.downloads[d as usize];
            let complete = !dl.failed && dl.found == blocks;
            let took = self.now - dl.started;
            let (reader, round) = (dl.reader, dl.round);
            if complete {
                self.metrics.downloads_completed += 1;
                self.metrics.rounds[round as usize].1 += 1;
                self.metrics.download_ns.push(took.as_nanos() as u64);
            }
            if let Some(r) = self.relay.as_mut() {
                // The wave's time: from its round's start to its last download's end.
                let rd = &self.s.readers;
                let start = rd.first_round_at_secs + f64::from(round) * rd.round_interval_secs;
                let span = self.now.as_nanos().saturating_sub((start * 1e9) as u64);
                let last = &mut r.metrics.round_span_ns[round as usize];
                *last = (*last).max(span);
            }
            self.downloads_done += 1;
            self.active_downloads[reader as usize] -= 1;
            if !self.s.readers.keep_state_between_rounds
                && self.active_downloads[reader as usize] == 0
            {
                // The page is closed: its sessions go with it.
                let now = self.now;
                for node in &mut self.nodes {
                    node.close_sessions(reader, now);
                }
                self.http_page_closed(reader);
            }
            trace!(
                self.trace,
                self.now,
                "download-end",
                "r={reader} round={round} complete={complete} ms={:.3}",
                ms(took)
            );
        }
    }
}
