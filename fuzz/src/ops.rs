//! Shared helpers of the machine targets: reading operations out of the fuzzer's bytes.

use peerblock_core::time::Instant;

/// The fuzzer's bytes, read front to back; past the end every read gives zeros (so every
/// input decodes to some finite sequence of operations).
#[derive(Clone)]
pub(crate) struct Src<'a> {
    data: &'a [u8],
}

impl<'a> Src<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Src { data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len()
    }

    pub(crate) fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// Up to `n` raw bytes (fewer at the end of the input).
    pub(crate) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
}

/// The zero-copy input path of a byte machine.
pub(crate) trait Window {
    /// The machine's `read_buf`.
    fn window(&mut self) -> Option<&mut [u8]>;
    /// The machine's `handle_read`.
    fn commit(&mut self, now: Instant, n: usize) -> usize;
}

/// Copies `data` into consecutive `read_buf` windows of `m`, committing each with
/// `handle_read`, until everything is taken, no window is lent, or a window took less than
/// was written into it. Returns the total taken. Every window must be non-empty and at most
/// `bound` bytes.
pub(crate) fn read_through<M: Window>(m: &mut M, now: Instant, data: &[u8], bound: usize) -> usize {
    let mut taken = 0;
    while taken < data.len() {
        let rest = &data[taken..];
        let Some(w) = m.window() else {
            break;
        };
        assert!(
            !w.is_empty(),
            "read_buf lent an empty window (reads as EOF)"
        );
        assert!(
            w.len() <= bound,
            "read_buf lent {} bytes, above the bound {bound}",
            w.len()
        );
        let n = w.len().min(rest.len());
        w[..n].copy_from_slice(&rest[..n]);
        let got = m.commit(now, n);
        assert!(got <= n, "handle_read took {got} of {n} bytes");
        taken += got;
        if got < n || got == 0 {
            break;
        }
    }
    taken
}

/// Offers `data` through the slice form until everything is taken or a call takes nothing.
pub(crate) fn input_through(data: &[u8], mut input: impl FnMut(&[u8]) -> usize) -> usize {
    let mut taken = 0;
    while taken < data.len() {
        let got = input(&data[taken..]);
        assert!(
            got <= data.len() - taken,
            "handle_input took more than offered"
        );
        taken += got;
        if got == 0 {
            break;
        }
    }
    taken
}
