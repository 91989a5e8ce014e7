//! A hand-written decoder for the stored tree format (postcard, as `Tree::encode` writes
//! it). serde's generic path spends most of a tree diff's time here (a visitor call per
//! hash byte, one per field); this reads the same bytes directly. Every malformed input
//! is an error, never a panic; the differential test below pins it to postcard.

use super::objects::{DirAttrs, Entry, Hash, Kind, Tree, Xattrs};

type R<T> = std::result::Result<T, &'static str>;

/// What a reader over part of a tree's bytes says when the item goes on past them.
const NEED_MORE: &str = "need more bytes";

struct Reader<'a> {
    buf: &'a [u8],
    /// `buf` is a window on the tree's bytes with more after it (`TreeStream`): running
    /// out means "read more", not "malformed".
    partial: bool,
}

impl<'a> Reader<'a> {
    fn whole(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            partial: false,
        }
    }

    fn end(&self) -> &'static str {
        if self.partial {
            NEED_MORE
        } else {
            "unexpected end"
        }
    }

    fn byte(&mut self) -> R<u8> {
        let (&b, rest) = self.buf.split_first().ok_or(self.end())?;
        self.buf = rest;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if n > self.buf.len() {
            return Err(self.end());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// LEB128 as postcard writes it: at most `max_bytes` bytes, no bits beyond `bits`.
    fn varint(&mut self, bits: u32) -> R<u64> {
        let max_bytes = bits.div_ceil(7);
        let mut v: u64 = 0;
        for i in 0..max_bytes {
            let b = self.byte()?;
            let shift = 7 * i;
            let part = (b & 0x7f) as u64;
            if shift + 7 > bits && part >> (bits - shift) != 0 {
                return Err("varint out of range");
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long")
    }

    fn u32(&mut self) -> R<u32> {
        Ok(self.varint(32)? as u32)
    }

    fn u64(&mut self) -> R<u64> {
        self.varint(64)
    }

    fn i64(&mut self) -> R<i64> {
        let z = self.varint(64)?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn bool(&mut self) -> R<bool> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err("bad bool"),
        }
    }

    fn len(&mut self) -> R<usize> {
        let n = self.varint(64)?;
        // Every element takes at least one byte: a longer length is a lie. A window
        // cannot tell yet (the stream reads on until the bytes end), so it only bounds
        // what is allocated up front (`capacity`).
        if !self.partial && n > self.buf.len() as u64 {
            return Err("length beyond the data");
        }
        usize::try_from(n).map_err(|_| "length beyond the data")
    }

    /// Room to reserve for `n` elements: never more than the bytes at hand could hold.
    fn capacity(&self, n: usize) -> usize {
        n.min(self.buf.len())
    }

    fn bytes(&mut self) -> R<Vec<u8>> {
        let n = self.len()?;
        Ok(self.take(n)?.to_vec())
    }

    fn option_tag(&mut self) -> R<bool> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err("bad option tag"),
        }
    }

    fn hash(&mut self) -> R<Hash> {
        Ok(Hash(self.take(32)?.try_into().expect("32 bytes")))
    }

    fn kind(&mut self) -> R<Kind> {
        // serde writes a unit variant as its index.
        Ok(match self.u32()? {
            0 => Kind::File,
            1 => Kind::Dir,
            2 => Kind::Symlink,
            3 => Kind::Fifo,
            4 => Kind::Socket,
            5 => Kind::CharDev,
            6 => Kind::BlockDev,
            _ => return Err("unknown entry kind"),
        })
    }

    fn xattrs(&mut self) -> R<Xattrs> {
        let n = self.len()?;
        let mut v = Vec::with_capacity(self.capacity(n));
        for _ in 0..n {
            v.push((self.bytes()?, self.bytes()?));
        }
        Ok(v)
    }

    fn entry(&mut self) -> R<Entry> {
        Ok(Entry {
            name: self.bytes()?,
            kind: self.kind()?,
            mode: self.u32()?,
            uid: self.u32()?,
            gid: self.u32()?,
            mtime_ns: self.i64()?,
            size: self.u64()?,
            hash: if self.option_tag()? {
                Some(self.hash()?)
            } else {
                None
            },
            target: if self.option_tag()? {
                Some(self.bytes()?)
            } else {
                None
            },
            rdev: self.u64()?,
            link_group: self.u64()?,
            has_links: self.bool()?,
            xattrs: self.xattrs()?,
        })
    }

    fn root_attrs(&mut self) -> R<Option<DirAttrs>> {
        Ok(if self.option_tag()? {
            Some(DirAttrs {
                mode: self.u32()?,
                uid: self.u32()?,
                gid: self.u32()?,
                mtime_ns: self.i64()?,
                xattrs: self.xattrs()?,
            })
        } else {
            None
        })
    }

    fn tree(&mut self) -> R<Tree> {
        let root_attrs = self.root_attrs()?;
        let n = self.len()?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            entries.push(self.entry()?);
        }
        Ok(Tree {
            root_attrs,
            entries,
        })
    }
}

/// Decodes a stored tree one entry at a time: `f` gets each entry (it may take its
/// fields) and returns whether to go on. Returns whether every entry was read. Checks
/// structure only, as `decode_tree` does.
pub fn for_each_entry(
    data: &[u8],
    f: &mut dyn FnMut(&mut Entry) -> std::result::Result<bool, String>,
) -> std::result::Result<bool, String> {
    let mut whole = Some(data);
    for_each_entry_from(
        &mut |buf| {
            Ok(match whole.take() {
                Some(d) => {
                    buf.extend_from_slice(d);
                    true
                }
                None => false,
            })
        },
        f,
    )
}

/// A tree's bytes read in pieces: `fill` appends the next piece to the buffer and says
/// false once there is none. Only the entry being decoded and one piece are held.
struct TreeStream<'f> {
    buf: Vec<u8>,
    /// Bytes of `buf` already decoded.
    pos: usize,
    /// `fill` said there is no more: `buf` ends where the tree ends.
    eof: bool,
    fill: &'f mut dyn FnMut(&mut Vec<u8>) -> std::result::Result<bool, String>,
}

impl TreeStream<'_> {
    /// Decodes one item with `item`, reading more bytes as long as it runs out of them.
    fn next<T>(&mut self, item: impl Fn(&mut Reader) -> R<T>) -> std::result::Result<T, String> {
        loop {
            let mut r = Reader {
                buf: &self.buf[self.pos..],
                partial: !self.eof,
            };
            match item(&mut r) {
                Ok(v) => {
                    self.pos = self.buf.len() - r.buf.len();
                    return Ok(v);
                }
                Err(NEED_MORE) => {
                    self.buf.drain(..self.pos);
                    self.pos = 0;
                    if !(self.fill)(&mut self.buf)? {
                        self.eof = true;
                    }
                }
                Err(e) => return Err(format!("undecodable tree: {e}")),
            }
        }
    }

    /// Whether bytes are left after the last item.
    fn trailing(&mut self) -> std::result::Result<bool, String> {
        while !self.eof && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            if !(self.fill)(&mut self.buf)? {
                self.eof = true;
            }
        }
        Ok(self.pos < self.buf.len())
    }
}

/// `for_each_entry` over bytes that come in pieces (`TreeStream`): a tree of a million
/// entries is decoded holding one piece of it, not its whole encoding.
pub fn for_each_entry_from(
    fill: &mut dyn FnMut(&mut Vec<u8>) -> std::result::Result<bool, String>,
    f: &mut dyn FnMut(&mut Entry) -> std::result::Result<bool, String>,
) -> std::result::Result<bool, String> {
    let mut s = TreeStream {
        buf: Vec::new(),
        pos: 0,
        eof: false,
        fill,
    };
    s.next(|r| r.root_attrs())?;
    let n = s.next(|r| r.len())?;
    for _ in 0..n {
        let mut e = s.next(|r| r.entry())?;
        if !f(&mut e)? {
            return Ok(false);
        }
    }
    if s.trailing()? {
        return Err("undecodable tree: trailing bytes".into());
    }
    Ok(true)
}

/// Decodes the bytes of a stored tree (structure only; `Tree::decode` checks the rest).
pub fn decode_tree(data: &[u8]) -> std::result::Result<Tree, String> {
    let mut r = Reader::whole(data);
    let tree = r.tree().map_err(|e| format!("undecodable tree: {e}"))?;
    if !r.buf.is_empty() {
        return Err("undecodable tree: trailing bytes".into());
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (no extra dependency for one test).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn bytes(&mut self, max: u64) -> Vec<u8> {
            let n = self.next() % (max + 1);
            (0..n).map(|_| self.next() as u8).collect()
        }
        /// Values across every varint length, including the extremes.
        fn wide(&mut self) -> u64 {
            match self.next() % 4 {
                0 => self.next() % 128,
                1 => u64::MAX - self.next() % 3,
                _ => self.next() >> (self.next() % 64),
            }
        }
    }

    fn random_tree(r: &mut Rng) -> Tree {
        let xattrs = |r: &mut Rng| {
            (0..r.next() % 3)
                .map(|_| (r.bytes(8), r.bytes(8)))
                .collect()
        };
        let kinds = [
            Kind::File,
            Kind::Dir,
            Kind::Symlink,
            Kind::Fifo,
            Kind::Socket,
            Kind::CharDev,
            Kind::BlockDev,
        ];
        Tree {
            root_attrs: r.next().is_multiple_of(2).then(|| DirAttrs {
                mode: r.wide() as u32,
                uid: r.wide() as u32,
                gid: r.wide() as u32,
                mtime_ns: r.wide() as i64,
                xattrs: xattrs(r),
            }),
            entries: (0..r.next() % 6)
                .map(|_| Entry {
                    name: r.bytes(20),
                    kind: kinds[(r.next() % 7) as usize],
                    mode: r.wide() as u32,
                    uid: r.wide() as u32,
                    gid: r.wide() as u32,
                    mtime_ns: r.wide() as i64,
                    size: r.wide(),
                    hash: (!r.next().is_multiple_of(3)).then(|| {
                        let mut h = [0u8; 32];
                        h.iter_mut().for_each(|b| *b = r.next() as u8);
                        Hash(h)
                    }),
                    target: r.next().is_multiple_of(3).then(|| r.bytes(30)),
                    rdev: r.wide(),
                    link_group: r.wide(),
                    has_links: r.next().is_multiple_of(2),
                    xattrs: xattrs(r),
                })
                .collect(),
        }
    }

    #[test]
    fn agrees_with_postcard_on_valid_and_mangled_trees() {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let tree = random_tree(&mut r);
            let enc = postcard::to_allocvec(&tree).unwrap();
            assert_eq!(decode_tree(&enc).unwrap(), tree);
            // Mangle: flip bytes, cut, extend. Wherever postcard reads the whole input
            // as a tree, so must we, with the same result; and never a panic.
            let mut bad = enc.clone();
            match r.next() % 3 {
                0 if !bad.is_empty() => {
                    let i = (r.next() as usize) % bad.len();
                    bad[i] ^= 1 << (r.next() % 8);
                }
                1 => bad.truncate((r.next() as usize) % (enc.len() + 1)),
                _ => bad.push(r.next() as u8),
            }
            let ours = decode_tree(&bad);
            if let Ok((t, rest)) = postcard::take_from_bytes::<Tree>(&bad)
                && rest.is_empty()
            {
                assert_eq!(ours.as_ref().ok(), Some(&t), "{bad:?}");
            } else {
                assert!(ours.is_err(), "{bad:?}");
            }
        }
    }

    /// Decoding in pieces of any size gives the entries decoding the whole gives, and
    /// fails exactly where it fails.
    #[test]
    fn pieces_of_any_size_decode_as_the_whole() {
        let mut r = Rng(0x2545_f491_4f6c_dd1d);
        for round in 0..5_000 {
            let tree = random_tree(&mut r);
            let mut enc = postcard::to_allocvec(&tree).unwrap();
            if round % 2 == 1 && !enc.is_empty() {
                match r.next() % 3 {
                    0 => {
                        let i = (r.next() as usize) % enc.len();
                        enc[i] ^= 1 << (r.next() % 8);
                    }
                    1 => enc.truncate((r.next() as usize) % enc.len()),
                    _ => enc.push(r.next() as u8),
                }
            }
            let piece = 1 + (r.next() as usize) % 40;
            let mut at = 0;
            let mut streamed = Vec::new();
            let ok = for_each_entry_from(
                &mut |buf| {
                    let end = (at + piece).min(enc.len());
                    buf.extend_from_slice(&enc[at..end]);
                    let more = end > at;
                    at = end;
                    Ok(more)
                },
                &mut |e| {
                    streamed.push(e.clone());
                    Ok(true)
                },
            );
            match decode_tree(&enc) {
                Ok(t) => {
                    assert_eq!(ok, Ok(true), "{enc:?}");
                    assert_eq!(streamed, t.entries);
                }
                Err(_) => assert!(ok.is_err(), "{enc:?}"),
            }
        }
    }
}
