//! A hand-written decoder for the stored tree format (postcard, as `Tree::encode` writes
//! it). serde's generic path spends most of a tree diff's time here (a visitor call per
//! hash byte, one per field); this reads the same bytes directly. Every malformed input
//! is an error, never a panic; the differential test below pins it to postcard.

use super::objects::{DirAttrs, Entry, Hash, Kind, Tree, Xattrs};

type R<T> = std::result::Result<T, &'static str>;

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> R<u8> {
        let (&b, rest) = self.buf.split_first().ok_or("unexpected end")?;
        self.buf = rest;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if n > self.buf.len() {
            return Err("unexpected end");
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
        // Every element takes at least one byte: a longer length is a lie.
        if n > self.buf.len() as u64 {
            return Err("length beyond the data");
        }
        Ok(n as usize)
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
        let mut v = Vec::with_capacity(n);
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

    fn tree(&mut self) -> R<Tree> {
        let root_attrs = if self.option_tag()? {
            Some(DirAttrs {
                mode: self.u32()?,
                uid: self.u32()?,
                gid: self.u32()?,
                mtime_ns: self.i64()?,
                xattrs: self.xattrs()?,
            })
        } else {
            None
        };
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
    let mut r = Reader { buf: data };
    let bad = |e: &str| format!("undecodable tree: {e}");
    if r.option_tag().map_err(bad)? {
        r.u32().map_err(bad)?;
        r.u32().map_err(bad)?;
        r.u32().map_err(bad)?;
        r.i64().map_err(bad)?;
        r.xattrs().map_err(bad)?;
    }
    let n = r.len().map_err(bad)?;
    for _ in 0..n {
        let mut e = r.entry().map_err(bad)?;
        if !f(&mut e)? {
            return Ok(false);
        }
    }
    if !r.buf.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(true)
}

/// Decodes the bytes of a stored tree (structure only; `Tree::decode` checks the rest).
pub fn decode_tree(data: &[u8]) -> std::result::Result<Tree, String> {
    let mut r = Reader { buf: data };
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
}
