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

use bytes::{Bytes, BytesMut};

pub mod gzip;
mod list;
pub mod printers;
pub mod protobuf;
pub mod render;
pub mod shared;
pub mod table;
pub mod watch;

pub use list::ListEncoder;
pub use render::{Form, ObjectWriter, Rendering};
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
pub struct ChunkWriter {
    buf: BytesMut,
    ready: VecDeque<Bytes>,
    chunk: usize,
    large: usize,
}

impl ChunkWriter {
    /// A writer producing chunks of about `chunk` bytes.
    pub fn new(chunk: usize) -> Self {
        ChunkWriter {
            buf: BytesMut::new(),
            ready: VecDeque::new(),
            chunk,
            large: chunk / 2,
        }
    }

    /// Copies a small piece into the current chunk.
    pub fn put_slice(&mut self, s: &[u8]) {
        if self.buf.capacity() == 0 {
            self.buf
                .reserve(self.chunk.saturating_add(512).min(1 << 20));
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

    /// Closes the current chunk (if any) so it can be taken.
    pub fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.ready.push_back(self.buf.split().freeze());
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
