//! gzip for streamed responses: one gzip member per response (curl, Go, Python and
//! tower-http all decode it), flushed per chunk so a watch stays live.
//!
//! A deflate compressor holds a few hundred KiB of state. LIST bodies and the initial phase of
//! a watch-list (where the bytes are) compress for real; once a watch goes live the
//! compressor is dropped and events are framed as *stored* deflate blocks, which need only a
//! running CRC — so an idle compressed watch costs a few bytes, not a compressor.

use bytes::Bytes;
use flate2::{Compress, Compression, Crc, FlushCompress};

/// kube-apiserver compresses with level 1 (speed over ratio); so do we.
const LEVEL: u32 = 1;

/// The gzip state of one response.
pub struct GzipStream {
    compressor: Option<Box<Compress>>,
    crc: Crc,
    header_sent: bool,
    finished: bool,
}

impl GzipStream {
    /// A stream that compresses (`compress`) or only frames (stored blocks) its input.
    pub fn new(compress: bool) -> Self {
        GzipStream {
            compressor: compress.then(|| Box::new(Compress::new(Compression::new(LEVEL), false))),
            crc: Crc::new(),
            header_sent: false,
            finished: false,
        }
    }

    fn header(&mut self, out: &mut Vec<u8>) {
        if !self.header_sent {
            out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
            self.header_sent = true;
        }
    }

    /// Encodes `chunk` and flushes, so the client can decode everything sent so far.
    pub fn encode(&mut self, chunk: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(chunk.len() / 3 + 64);
        self.header(&mut out);
        self.crc.update(chunk);
        match self.compressor.as_mut() {
            Some(c) => {
                let mut consumed = 0;
                loop {
                    out.reserve((chunk.len() - consumed) / 2 + 1024);
                    let before_in = c.total_in();
                    let status = c.compress_vec(&chunk[consumed..], &mut out, FlushCompress::Sync);
                    consumed += (c.total_in() - before_in) as usize;
                    // compress_vec only fills spare capacity: when input is used up and room
                    // is left over, the sync flush is complete.
                    if status.is_err() || (consumed == chunk.len() && out.len() < out.capacity()) {
                        break;
                    }
                }
            }
            None => stored_blocks(&mut out, chunk),
        }
        Bytes::from(out)
    }

    /// Drops the compressor; later chunks are framed as stored blocks.
    pub fn stop_compressing(&mut self) {
        self.compressor = None;
    }

    /// The end of the stream (final empty block, CRC and size), once.
    pub fn finish(&mut self) -> Option<Bytes> {
        if self.finished {
            return None;
        }
        self.finished = true;
        let mut out = Vec::with_capacity(32);
        self.header(&mut out);
        // A final, empty stored block: BFINAL=1, BTYPE=00, LEN=0, NLEN=0xffff.
        out.extend_from_slice(&[0x01, 0x00, 0x00, 0xff, 0xff]);
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
        Some(Bytes::from(out))
    }
}

/// Non-final stored deflate blocks holding `data` (the stream is byte-aligned after a sync
/// flush or another stored block, so a block starts with its header byte), then an empty
/// stored block — the marker a sync flush ends with. Go's flate reader keeps a stored
/// block's bytes in its window until the next block header arrives and hands them out on an
/// empty block; without the marker a Go client (kubectl, client-go) would see each event
/// only when the next one came.
fn stored_blocks(out: &mut Vec<u8>, data: &[u8]) {
    for piece in data.chunks(65_535) {
        let len = piece.len() as u16;
        out.push(0x00);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(piece);
    }
    out.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(wire: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        // A single-member decoder: what curl and tower-http do.
        flate2::read::GzDecoder::new(wire)
            .read_to_end(&mut got)
            .expect("decode");
        got
    }

    #[test]
    fn compressed_then_stored_is_one_valid_member() {
        let a = b"{\"type\":\"ADDED\"}\n".repeat(5000);
        let b = b"{\"type\":\"DELETED\"}\n".repeat(3);
        let big = vec![b'x'; 150_000];
        let mut g = GzipStream::new(true);
        let mut wire = g.encode(&a).to_vec();
        let compressed = wire.len();
        // Every flushed piece decodes on its own so far (the watch stays live).
        let mut partial = Vec::new();
        let _ = flate2::read::GzDecoder::new(&wire[..]).read_to_end(&mut partial);
        assert_eq!(partial, a);
        g.stop_compressing();
        wire.extend_from_slice(&g.encode(&b));
        wire.extend_from_slice(&g.encode(&big));
        wire.extend_from_slice(&g.finish().expect("finish"));
        assert!(g.finish().is_none());
        let mut want = a.clone();
        want.extend_from_slice(&b);
        want.extend_from_slice(&big);
        assert_eq!(decode(&wire), want);
        assert!(compressed < a.len() / 10, "{compressed}");
    }

    #[test]
    fn every_chunk_ends_with_the_sync_flush_marker() {
        // Both framings end each chunk with an empty stored block, so readers that flush
        // only at block boundaries (Go) deliver the chunk at once.
        for compress in [true, false] {
            let mut g = GzipStream::new(compress);
            for chunk in [&b"{\"type\":\"ADDED\"}\n"[..], b"x"] {
                let out = g.encode(chunk);
                assert!(
                    out.ends_with(&[0x00, 0x00, 0x00, 0xff, 0xff]),
                    "compress={compress}"
                );
            }
        }
    }

    #[test]
    fn empty_and_uncompressed_streams() {
        let mut g = GzipStream::new(false);
        let wire = g.finish().expect("finish");
        assert_eq!(decode(&wire), b"");
        let mut g = GzipStream::new(true);
        let mut wire = g.encode(b"hello").to_vec();
        wire.extend_from_slice(&g.finish().expect("finish"));
        assert_eq!(decode(&wire), b"hello");
    }
}
