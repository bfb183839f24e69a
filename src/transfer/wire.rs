//! The records `push` and `pull` exchange with the master's `tree_sync.py`: a 30-byte header
//! (kind, mode, size, mtime in nanoseconds, the lengths of path, link target and hash), then
//! those bytes. Names are bytes, never text: a name with a line break or in another encoding
//! travels as it is. A file's body follows its record as chunks (a u32 length, then bytes), a
//! zero length, then a status byte (`k` whole, `a` given up) and the mtime to set.
//!
//! Pure: encodes into and decodes from byte buffers and `Read`ers; no I/O of its own.

use std::io::Read;

/// Bytes of a record's header.
pub const HEADER_LEN: usize = 30;
/// Largest chunk of a file's body a sender writes (and a receiver accepts).
pub const CHUNK: usize = 1 << 20;
/// Longest name or link target accepted from the other side (Linux's PATH_MAX is 4096).
const MAX_NAME: u32 = 64 * 1024;

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The root of a call (request and answer).
    Root,
    Dir,
    File,
    Link,
    /// Mode and mtime of a file the receiver already holds whole.
    Attrs,
    /// Delete this entry (a folder with everything in it).
    Delete,
    /// Asked for, but gone by the time the sender looked.
    Vanished,
    End,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Root => b'R',
            Kind::Dir => b'd',
            Kind::File => b'f',
            Kind::Link => b'l',
            Kind::Attrs => b'a',
            Kind::Delete => b'x',
            Kind::Vanished => b'v',
            Kind::End => b'E',
        }
    }

    fn of(byte: u8) -> Option<Kind> {
        Some(match byte {
            b'R' => Kind::Root,
            b'd' => Kind::Dir,
            b'f' => Kind::File,
            b'l' => Kind::Link,
            b'a' => Kind::Attrs,
            b'x' => Kind::Delete,
            b'v' => Kind::Vanished,
            b'E' => Kind::End,
            _ => return None,
        })
    }
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub path: Vec<u8>,
    pub link: Vec<u8>,
    pub hash: Vec<u8>,
}

impl Record {
    pub fn new(kind: Kind, path: &[u8]) -> Record {
        Record {
            kind,
            mode: 0,
            size: 0,
            mtime_ns: 0,
            path: path.to_vec(),
            link: Vec::new(),
            hash: Vec::new(),
        }
    }

    pub fn end() -> Record {
        Record::new(Kind::End, b"")
    }

    /// Appends the record to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.kind.byte());
        out.extend_from_slice(&self.mode.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.mtime_ns.to_be_bytes());
        out.extend_from_slice(&(self.path.len() as u32).to_be_bytes());
        out.extend_from_slice(&(self.link.len() as u32).to_be_bytes());
        out.push(self.hash.len().min(255) as u8);
        out.extend_from_slice(&self.path);
        out.extend_from_slice(&self.link);
        out.extend_from_slice(&self.hash[..self.hash.len().min(255)]);
    }
}

/// A stream the other side sent that cannot be read as records.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the stream ended in the middle of a record")]
    Truncated,
    #[error("a record of unknown kind {0:#04x}")]
    UnknownKind(u8),
    #[error("a name or link of {0} bytes (at most {MAX_NAME})")]
    TooLong(u32),
    #[error("a chunk of {0} bytes (at most {CHUNK})")]
    ChunkTooLarge(u32),
    #[error("a file's end marker {0:#04x} (expected `k` or `a`)")]
    BadStatus(u8),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<(), WireError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => WireError::Truncated,
        _ => WireError::Io(e),
    })
}

fn read_bytes(r: &mut impl Read, len: u32) -> Result<Vec<u8>, WireError> {
    if len > MAX_NAME {
        return Err(WireError::TooLong(len));
    }
    let mut v = vec![0; len as usize];
    read_exact(r, &mut v)?;
    Ok(v)
}

/// Reads one record.
pub fn read_record(r: &mut impl Read) -> Result<Record, WireError> {
    let mut h = [0u8; HEADER_LEN];
    read_exact(r, &mut h)?;
    let kind = Kind::of(h[0]).ok_or(WireError::UnknownKind(h[0]))?;
    let be32 = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&h[5..13]);
    let size = u64::from_be_bytes(eight);
    eight.copy_from_slice(&h[13..21]);
    let mtime_ns = i64::from_be_bytes(eight);
    let path = read_bytes(r, be32(21))?;
    let link = read_bytes(r, be32(25))?;
    let hash = read_bytes(r, u32::from(h[29]))?;
    Ok(Record {
        kind,
        mode: be32(1),
        size,
        mtime_ns,
        path,
        link,
        hash,
    })
}

/// A file body's next piece: a chunk's bytes (into `buf`), or its end.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    /// `n` bytes are in the buffer.
    Chunk(usize),
    /// The body is whole; set this mtime.
    Whole { mtime_ns: i64 },
    /// The sender gave the file up (it changed size or vanished while read).
    GivenUp,
}

/// Reads the next piece of a file's body into `buf` (which grows to the chunk's size).
pub fn read_piece(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<Piece, WireError> {
    let mut four = [0u8; 4];
    read_exact(r, &mut four)?;
    let n = u32::from_be_bytes(four);
    if n == 0 {
        let mut tail = [0u8; 9];
        read_exact(r, &mut tail)?;
        let mut eight = [0u8; 8];
        eight.copy_from_slice(&tail[1..]);
        return match tail[0] {
            b'k' => Ok(Piece::Whole {
                mtime_ns: i64::from_be_bytes(eight),
            }),
            b'a' => Ok(Piece::GivenUp),
            other => Err(WireError::BadStatus(other)),
        };
    }
    if n as usize > CHUNK {
        return Err(WireError::ChunkTooLarge(n));
    }
    buf.resize(n as usize, 0);
    read_exact(r, buf)?;
    Ok(Piece::Chunk(n as usize))
}

/// A chunk's length prefix.
pub fn chunk_header(len: usize) -> [u8; 4] {
    (len as u32).to_be_bytes()
}

/// The end of a file's body: zero length, status, mtime.
pub fn body_end(whole: bool, mtime_ns: i64) -> [u8; 13] {
    let mut out = [0u8; 13];
    out[4] = if whole { b'k' } else { b'a' };
    out[5..].copy_from_slice(&mtime_ns.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_comes_back_as_it_went_with_any_bytes_in_its_name() {
        let r = Record {
            kind: Kind::Link,
            mode: 0o755,
            size: 42,
            mtime_ns: -1_234_567_890_123,
            path: b"a dir/new\nline/\xff\xfe".to_vec(),
            link: b"../target".to_vec(),
            hash: vec![7; 32],
        };
        let mut buf = Vec::new();
        r.encode(&mut buf);
        Record::end().encode(&mut buf);
        assert_eq!(buf.len(), HEADER_LEN * 2 + r.path.len() + r.link.len() + 32);
        let mut rd = &buf[..];
        assert_eq!(read_record(&mut rd).unwrap(), r);
        assert_eq!(read_record(&mut rd).unwrap().kind, Kind::End);
        assert!(matches!(read_record(&mut rd), Err(WireError::Truncated)));
    }

    #[test]
    fn a_body_reads_back_in_chunks_then_its_end() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&chunk_header(3));
        buf.extend_from_slice(b"abc");
        buf.extend_from_slice(&body_end(true, 99));
        buf.extend_from_slice(&body_end(false, 0));
        let mut rd = &buf[..];
        let mut chunk = Vec::new();
        assert_eq!(read_piece(&mut rd, &mut chunk).unwrap(), Piece::Chunk(3));
        assert_eq!(chunk, b"abc");
        assert_eq!(
            read_piece(&mut rd, &mut chunk).unwrap(),
            Piece::Whole { mtime_ns: 99 }
        );
        assert_eq!(read_piece(&mut rd, &mut chunk).unwrap(), Piece::GivenUp);
    }

    #[test]
    fn hostile_streams_are_refused_not_trusted() {
        let mut unknown = vec![b'?'];
        unknown.extend_from_slice(&[0; HEADER_LEN - 1]);
        assert!(matches!(
            read_record(&mut &unknown[..]),
            Err(WireError::UnknownKind(b'?'))
        ));
        // a name length of 4 GB is refused before anything is allocated
        let mut huge = Vec::new();
        Record::new(Kind::File, b"").encode(&mut huge);
        huge[21..25].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            read_record(&mut &huge[..]),
            Err(WireError::TooLong(u32::MAX))
        ));
        let big_chunk = chunk_header(CHUNK + 1);
        assert!(matches!(
            read_piece(&mut &big_chunk[..], &mut Vec::new()),
            Err(WireError::ChunkTooLarge(_))
        ));
        let mut bad_end = body_end(true, 1);
        bad_end[4] = b'z';
        assert!(matches!(
            read_piece(&mut &bad_end[..], &mut Vec::new()),
            Err(WireError::BadStatus(b'z'))
        ));
    }
}
