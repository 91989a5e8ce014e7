//! Bounded capture of one output stream: its first `head` bytes and its last `tail`
//! bytes, with the count of everything that went by. Test summaries and error messages
//! are at the end of an output, banners at its start: both are kept, the middle is
//! dropped, and memory stays at `head + tail` however much the command prints.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Default bytes kept from the start and from the end of each stream: 16 KiB of one
/// stream is about 4 000 tokens, so both streams of an envelope stay a small part of a
/// model's context; the whole output is kept on disk (`outputs`, `avfs output`), and a
/// person who wants more inline passes `--output-head`/`--output-tail`.
pub const DEFAULT_HEAD: usize = 8 * 1024;
pub const DEFAULT_TAIL: usize = 8 * 1024;

/// How much of each stream is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureLimits {
    pub head: usize,
    pub tail: usize,
}

impl Default for CaptureLimits {
    fn default() -> Self {
        CaptureLimits {
            head: DEFAULT_HEAD,
            tail: DEFAULT_TAIL,
        }
    }
}

/// What was kept of one stream.
#[derive(Debug, Default)]
pub struct Capture {
    pub head: Vec<u8>,
    pub tail: VecDeque<u8>,
    /// Bytes the stream carried, kept or not.
    pub total: u64,
    tail_limit: usize,
    head_limit: usize,
}

impl Capture {
    pub fn new(limits: CaptureLimits) -> Capture {
        Capture {
            head_limit: limits.head,
            tail_limit: limits.tail,
            ..Capture::default()
        }
    }

    /// A capture that already holds `data` (a stream that was never read).
    pub fn of(data: &[u8]) -> Capture {
        Capture {
            head: data.to_vec(),
            head_limit: data.len(),
            ..Capture::default()
        }
    }

    pub fn push(&mut self, buf: &[u8]) {
        self.total += buf.len() as u64;
        let room = self.head_limit.saturating_sub(self.head.len());
        let (first, rest) = buf.split_at(room.min(buf.len()));
        self.head.extend_from_slice(first);
        if self.tail_limit == 0 || rest.is_empty() {
            return;
        }
        // Only the last `tail_limit` bytes of this piece can matter.
        let rest = &rest[rest.len().saturating_sub(self.tail_limit)..];
        self.tail.extend(rest);
        let over = self.tail.len().saturating_sub(self.tail_limit);
        self.tail.drain(..over);
    }

    /// Bytes dropped between the head and the tail.
    pub fn omitted(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The kept text (lossily decoded), with a marker line where bytes were dropped.
    pub fn text(&self, stream: &str) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        let omitted = self.omitted();
        if omitted > 0 {
            if !s.is_empty() && !s.ends_with('\n') {
                s.push('\n');
            }
            s.push_str(&format!(
                "[avfs: {omitted} bytes of {stream} omitted here; {} in all]\n",
                self.total
            ));
        }
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_and_tail_are_kept_and_the_middle_is_counted() {
        let mut c = Capture::new(CaptureLimits { head: 4, tail: 3 });
        for piece in [&b"ab"[..], b"cdef", b"ghij", b"k"] {
            c.push(piece);
        }
        assert_eq!(c.total, 11);
        assert_eq!(c.head, b"abcd");
        assert_eq!(c.tail.iter().copied().collect::<Vec<_>>(), b"ijk");
        assert_eq!(c.omitted(), 4);
        assert_eq!(
            c.text("stdout"),
            "abcd\n[avfs: 4 bytes of stdout omitted here; 11 in all]\nijk"
        );
    }

    #[test]
    fn a_short_stream_is_kept_whole() {
        let mut c = Capture::new(CaptureLimits { head: 4, tail: 4 });
        c.push(b"abcdef");
        assert_eq!(c.omitted(), 0);
        assert_eq!(c.text("stdout"), "abcdef");
    }

    #[test]
    fn tail_only() {
        let mut c = Capture::new(CaptureLimits { head: 0, tail: 2 });
        c.push(b"abcdef");
        assert_eq!(
            c.text("stderr"),
            "[avfs: 4 bytes of stderr omitted here; 6 in all]\nef"
        );
    }
}
