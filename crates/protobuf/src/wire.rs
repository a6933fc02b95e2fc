//! The protobuf wire format, read without copying: field numbers with varint, fixed and
//! length-delimited values given as positions into one input buffer.

use crate::{OrMalformed, ProtoError};

/// One field value as it sits on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 5.
    Fixed32(u32),
    /// Wire type 2: the value's bytes are `input[start..end]`.
    Len(u32, u32),
}

/// Reads the fields of one message in `input[pos..end]`.
pub struct FieldReader<'a> {
    input: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> FieldReader<'a> {
    /// A reader over `input[start..end]` (positions stay relative to `input`).
    pub fn new(input: &'a [u8], start: usize, end: usize) -> Self {
        FieldReader {
            input,
            pos: start,
            end: end.min(input.len()),
        }
    }

    /// The next field number and value, `None` at the end.
    pub fn next_field(&mut self) -> Result<Option<(u32, Value)>, ProtoError> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| ProtoError::Malformed("field number"))?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(self.take::<8>()?)),
            5 => Value::Fixed32(u32::from_le_bytes(self.take::<4>()?)),
            2 => {
                let len =
                    usize::try_from(self.varint()?).map_err(|_| ProtoError::Malformed("length"))?;
                let start = self.pos;
                let end = start
                    .checked_add(len)
                    .filter(|e| *e <= self.end)
                    .or_malformed("length past the end")?;
                self.pos = end;
                let s = u32::try_from(start).map_err(|_| ProtoError::Malformed("too large"))?;
                let e = u32::try_from(end).map_err(|_| ProtoError::Malformed("too large"))?;
                Value::Len(s, e)
            }
            _ => return Err(ProtoError::Malformed("wire type")),
        };
        Ok(Some((tag, value)))
    }

    /// Bytes left in the window.
    pub fn remaining(&self) -> usize {
        self.end.saturating_sub(self.pos)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let bytes = self
            .input
            .get(self.pos..self.pos + N)
            .filter(|_| self.pos + N <= self.end)
            .or_malformed("truncated fixed value")?;
        self.pos += N;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Reads one base-128 varint.
    pub fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .input
                .get(self.pos)
                .filter(|_| self.pos < self.end)
                .or_malformed("truncated varint")?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError::Malformed("varint too long"))
    }
}

/// The bytes of a length-delimited value.
pub fn slice(input: &[u8], start: u32, end: u32) -> &[u8] {
    input.get(start as usize..end as usize).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_wire_type() {
        // field 1 varint 300, field 2 bytes "hi", field 3 fixed64 1, field 4 fixed32 2
        let buf = [
            0x08, 0xac, 0x02, 0x12, 0x02, b'h', b'i', 0x19, 1, 0, 0, 0, 0, 0, 0, 0, 0x25, 2, 0, 0,
            0,
        ];
        let mut r = FieldReader::new(&buf, 0, buf.len());
        assert_eq!(r.next_field().ok().flatten(), Some((1, Value::Varint(300))));
        assert_eq!(r.next_field().ok().flatten(), Some((2, Value::Len(5, 7))));
        assert_eq!(r.next_field().ok().flatten(), Some((3, Value::Fixed64(1))));
        assert_eq!(r.next_field().ok().flatten(), Some((4, Value::Fixed32(2))));
        assert_eq!(r.next_field().ok().flatten(), None);
    }

    #[test]
    fn rejects_lengths_past_the_end() {
        let buf = [0x12, 0x05, b'h'];
        let mut r = FieldReader::new(&buf, 0, buf.len());
        assert!(r.next_field().is_err());
        let buf = [0x08, 0x80];
        assert!(FieldReader::new(&buf, 0, 2).next_field().is_err());
    }
}
