//! listwatch-codec: where bytes are laid out for the socket.
//!
//! - [`ChunkWriter`]: coalesces small pieces into bounded chunks and passes large records
//!   through as their own shared `Bytes` (no copy).
//! - [`ObjectWriter`] (built by a negotiated [`Rendering`]): the bytes of every piece of a
//!   response in its form — the one seam LIST, WATCH and GET write through.
//! - [`ListEncoder`]: a LIST response body, produced chunk by chunk from a snapshot.
//! - [`WatchEncoder`]: a watch body (initial events, bookmarks, live events, ERROR) from a
//!   snapshot and a cursor; [`watch`] also has the event framing.

use std::collections::VecDeque;

use bytes::Bytes;

mod frame;
pub mod gzip;
pub mod lengths;
mod list;
pub mod printers;
pub mod protobuf;
pub mod render;
pub mod shared;
pub mod table;
pub mod watch;

pub use list::ListEncoder;
pub use render::{Form, ObjectWriter, Rendering};
pub use shared::Sharing;
pub use watch::{WatchEncoder, WatchSpec, WatchStep};

/// The wire encoding negotiated for a response; the encoders lay bytes out in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json` (objects are stored as JSON and sent as they are).
    #[default]
    Json,
    /// `application/vnd.kubernetes.protobuf` (transcoded per response, see
    /// [`protobuf`]).
    Protobuf,
}
pub use table::{IncludeObject, TableFormat};

/// Default chunk size: a response holds at most about this much copied data at once.
pub const DEFAULT_CHUNK: usize = 64 * 1024;

/// Collects output into chunks of about `chunk` bytes. Pieces of at least `large` bytes are
/// not copied: the current chunk is closed and the piece is queued as it is.
///
/// A closed chunk takes its whole allocation with it, so a writer between chunks holds no
/// memory: a watch that sent one event keeps nothing for the rest of its life (a
/// `BytesMut` split would keep the rest of a 64 KiB allocation alive with it). The next
/// chunk's allocation is sized by the last one's length, so chunks of one event each (live
/// watch events) take a few KiB, not a whole chunk.
pub struct ChunkWriter {
    buf: Vec<u8>,
    ready: VecDeque<Bytes>,
    chunk: usize,
    large: usize,
    /// Capacity the next chunk starts with.
    next: usize,
}

/// The smallest allocation a chunk starts with.
const MIN_CHUNK_ALLOCATION: usize = 1024;

impl ChunkWriter {
    /// A writer producing chunks of about `chunk` bytes.
    pub fn new(chunk: usize) -> Self {
        ChunkWriter {
            buf: Vec::new(),
            ready: VecDeque::new(),
            chunk,
            large: chunk / 2,
            next: Self::full_allocation(chunk),
        }
    }

    /// A writer for one small body built whole (a single object, one event line): one
    /// buffer grown as needed, nothing passed by reference.
    pub fn unbounded() -> Self {
        ChunkWriter {
            next: MIN_CHUNK_ALLOCATION,
            ..ChunkWriter::new(usize::MAX >> 1)
        }
    }

    /// A full chunk's allocation: the chunk and the tail of the piece that crosses it.
    fn full_allocation(chunk: usize) -> usize {
        chunk.saturating_add(512).min(1 << 20)
    }

    /// Copies a small piece into the current chunk. A piece that would take a full chunk
    /// past its allocation starts the next one instead: growing it would copy the whole
    /// chunk again (once per chunk of a LIST, measured at 7 % of a protobuf LIST's CPU).
    pub fn put_slice(&mut self, s: &[u8]) {
        let len = self.buf.len() + s.len();
        if len > self.buf.capacity() && len > self.chunk && !self.buf.is_empty() {
            self.flush();
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve(self.next.max(s.len()));
        }
        self.buf.extend_from_slice(s);
    }

    /// Adds shared bytes: copied when small, queued by reference when large.
    pub fn put_bytes(&mut self, b: Bytes) {
        if b.len() >= self.large {
            self.flush();
            self.ready.push_back(b);
        } else {
            self.put_slice(&b);
        }
    }

    /// Adds bytes other responses send too (a LIST's run of items): queued by reference
    /// unless smaller than an eighth of a chunk, so that each response does not copy them.
    pub fn put_shared(&mut self, b: Bytes) {
        if b.len() >= self.chunk / 8 {
            self.flush();
            self.ready.push_back(b);
        } else {
            self.put_slice(&b);
        }
    }

    /// Closes the current chunk (if any) so it can be taken; the writer keeps no allocation.
    pub fn flush(&mut self) {
        if !self.buf.is_empty() {
            let len = self.buf.len();
            // Twice what the last chunk needed: full chunks stay full-sized, single events
            // stay small.
            self.next = len
                .saturating_mul(2)
                .clamp(MIN_CHUNK_ALLOCATION, Self::full_allocation(self.chunk));
            self.ready
                .push_back(Bytes::from(std::mem::take(&mut self.buf)));
        }
    }

    /// Whether enough is queued that the caller should hand chunks out before adding more.
    pub fn is_full(&self) -> bool {
        !self.ready.is_empty() || self.buf.len() >= self.chunk
    }

    /// Takes the next finished chunk.
    pub fn pop(&mut self) -> Option<Bytes> {
        if self.ready.is_empty() && self.buf.len() >= self.chunk {
            self.flush();
        }
        self.ready.pop_front()
    }

    /// Everything written, as one buffer (for small one-off bodies, not for streaming).
    pub fn into_vec(mut self) -> Vec<u8> {
        if self.ready.is_empty() {
            return self.buf;
        }
        self.flush();
        let mut all = Vec::with_capacity(self.ready.iter().map(Bytes::len).sum());
        for c in self.ready {
            all.extend_from_slice(&c);
        }
        all
    }

    /// Bytes copied into the open chunk and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.ready.iter().map(Bytes::len).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_between_chunks_holds_no_allocation() {
        let mut w = ChunkWriter::new(DEFAULT_CHUNK);
        w.put_slice(&[b'x'; 1000]);
        assert!(
            w.buf.capacity() >= DEFAULT_CHUNK,
            "the first chunk starts full-sized"
        );
        w.flush();
        assert_eq!(
            w.buf.capacity(),
            0,
            "a closed chunk takes its allocation along"
        );
        assert_eq!(w.pop().map(|c| c.len()), Some(1000));
        // One event per chunk (a live watch): the next allocation follows the last length.
        w.put_slice(&[b'y'; 100]);
        let held = w.buf.capacity();
        assert!((100..=4096).contains(&held), "{held}");
        w.flush();
        assert_eq!(w.buf.capacity(), 0);
        assert_eq!(w.pop().map(|c| c.len()), Some(100));
        // Full chunks again (a LIST page): back to full size, each taken whole.
        for _ in 0..3 {
            while !w.is_full() {
                w.put_slice(&[b'z'; 1000]);
            }
            let c = w.pop().expect("a full chunk");
            assert!(c.len() > DEFAULT_CHUNK - 1000, "{}", c.len());
        }
        w.flush();
        while w.pop().is_some() {}
        assert!(w.next >= DEFAULT_CHUNK);
        // Pieces that do not fit the rest of a full chunk's allocation start the next
        // chunk rather than growing (and copying) this one; the bytes are the same.
        let full = ChunkWriter::full_allocation(DEFAULT_CHUNK);
        let (mut written, mut sent) = (Vec::new(), Vec::new());
        for i in 0..100u8 {
            let piece = vec![i; 2900 + usize::from(i)];
            w.put_slice(&piece);
            written.extend_from_slice(&piece);
            assert!(w.buf.capacity() <= full);
            while let Some(c) = w.pop() {
                assert!(
                    (DEFAULT_CHUNK - 3000..=full).contains(&c.len()),
                    "{}",
                    c.len()
                );
                sent.extend_from_slice(&c);
            }
        }
        w.flush();
        while let Some(c) = w.pop() {
            assert!(!c.is_empty());
            sent.extend_from_slice(&c);
        }
        assert!(sent == written, "chunks joined are the bytes written");
    }

    #[test]
    fn a_body_built_whole_is_sized_by_its_content() {
        let mut w = ChunkWriter::unbounded();
        w.put_slice(b"{}");
        assert!(w.buf.capacity() <= MIN_CHUNK_ALLOCATION);
        let big = vec![b'a'; 300_000];
        w.put_bytes(Bytes::from(big));
        let body = w.into_vec();
        assert_eq!(body.len(), 300_002);
        assert!(body.capacity() < 1 << 20, "{}", body.capacity());
    }
}
