//! A receive buffer that a driver can also read into directly.

use bytes::BytesMut;

/// Received bytes not yet decoded, followed by spare bytes a driver may read into.
///
/// The spare bytes are initialised (zeroed when first added, stale data afterwards) and
/// stay at the end of the buffer when decoded bytes are split off its front, so a driver
/// that reads straight into [`read_buf`](Self::read_buf) reuses them instead of paying
/// for a copy per read (what [`extend`](Self::extend) costs) or a fresh zeroing.
#[derive(Debug)]
pub(crate) struct RecvBuf {
    /// `data ++ spare`: the last `spare` bytes are not data.
    buf: BytesMut,
    spare: usize,
    /// Length of the window the last `read_buf` handed out: what `commit` may claim.
    lent: usize,
}

impl RecvBuf {
    pub(crate) fn with_capacity(capacity: usize) -> RecvBuf {
        RecvBuf {
            buf: BytesMut::with_capacity(capacity),
            spare: 0,
            lent: 0,
        }
    }

    /// Bytes of data.
    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.spare
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data.
    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[..self.len()]
    }

    /// Splits the first `n` data bytes off (`n <= len()`); the spare bytes stay.
    pub(crate) fn split_to(&mut self, n: usize) -> BytesMut {
        assert!(n <= self.len(), "split past the data");
        self.lent = 0;
        self.buf.split_to(n)
    }

    /// Splits all the data off; the spare bytes stay.
    pub(crate) fn split_all(&mut self) -> BytesMut {
        self.split_to(self.len())
    }

    /// Appends `data`, into the spare bytes first.
    pub(crate) fn extend(&mut self, data: &[u8]) {
        self.lent = 0;
        let into_spare = data.len().min(self.spare);
        let at = self.len();
        self.buf[at..at + into_spare].copy_from_slice(&data[..into_spare]);
        self.spare -= into_spare;
        self.buf.extend_from_slice(&data[into_spare..]);
    }

    /// Reserves room for `additional` more bytes.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.buf.reserve(additional.saturating_sub(self.spare));
    }

    /// `want` writable bytes right after the data (zeroing only bytes never handed out
    /// before). Whatever is written there is data once [`commit`](Self::commit)ted.
    pub(crate) fn read_buf(&mut self, want: usize) -> &mut [u8] {
        if self.spare < want {
            self.buf.resize(self.buf.len() + (want - self.spare), 0);
            self.spare = want;
        }
        self.lent = want;
        let at = self.len();
        &mut self.buf[at..at + want]
    }

    /// Makes the first `n` bytes of the last [`read_buf`](Self::read_buf) window data
    /// (at most that window's length). Returns how many were committed.
    pub(crate) fn commit(&mut self, n: usize) -> usize {
        let n = n.min(self.lent);
        self.lent = 0;
        self.spare -= n;
        n
    }

    /// Forgets the last [`read_buf`](Self::read_buf) window without committing it.
    pub(crate) fn discard_lent(&mut self) {
        self.lent = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_extends_interleave_and_spare_bytes_survive_splits() {
        let mut b = RecvBuf::with_capacity(16);
        b.extend(b"ab");
        b.read_buf(8)[..3].copy_from_slice(b"cde");
        assert_eq!(b.commit(3), 3);
        assert_eq!(b.data(), b"abcde");
        // The five spare bytes left are reused: an extend lands in them.
        b.extend(b"fg");
        assert_eq!(b.data(), b"abcdefg");
        assert_eq!(&b.split_to(4)[..], b"abcd");
        assert_eq!(b.data(), b"efg");
        let window = b.read_buf(2);
        assert_eq!(window.len(), 2);
        window.copy_from_slice(b"hi");
        // Committing more than was lent commits the window only.
        assert_eq!(b.commit(9), 2);
        assert_eq!(&b.split_all()[..], b"efghi");
        assert!(b.is_empty());
        // Nothing lent: nothing to commit.
        assert_eq!(b.commit(1), 0);
        let _ = b.read_buf(4);
        b.discard_lent();
        assert_eq!(b.commit(4), 0);
        assert!(b.is_empty());
    }
}
