//! Names are bytes; this is their one text form, used wherever a name or a workspace path
//! leaves avfs as text (JSON, human output, error messages) and read back wherever one
//! comes in as text (command-line paths, MCP arguments).
//!
//! The form is the name itself when it is valid UTF-8 without a backslash, so ordinary
//! names never change. Otherwise a backslash is written `\\` and each byte that is not
//! part of valid UTF-8 is written `\xHH` (two lowercase hex digits): `n\xff` and `n\xfe`
//! stay two different names, and the form maps back to exactly the bytes it came from.
//! Reading accepts raw bytes too (a shell passes them as they are), and a backslash
//! followed by anything else stands for itself, so `a\b` typed by hand means `a\b`.

/// The text form of `bytes` (see the module documentation).
pub fn escape(bytes: &[u8]) -> String {
    if !bytes.contains(&b'\\')
        && let Ok(s) = std::str::from_utf8(bytes)
    {
        return s.to_string();
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The bytes a text form (or raw bytes) stands for: the inverse of [`escape`].
pub fn unescape(text: &[u8]) -> Vec<u8> {
    if !text.contains(&b'\\') {
        return text.to_vec();
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' {
            match text.get(i + 1) {
                Some(b'\\') => {
                    out.push(b'\\');
                    i += 2;
                    continue;
                }
                Some(b'x') => {
                    if let (Some(h), Some(l)) = (
                        text.get(i + 2).and_then(|b| hex(*b)),
                        text.get(i + 3).and_then(|b| hex(*b)),
                    ) {
                        out.push(h << 4 | l);
                        i += 4;
                        continue;
                    }
                }
                _ => {}
            }
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_single_byte_and_pair_round_trips() {
        for a in 0..=255u8 {
            assert_eq!(unescape(escape(&[a]).as_bytes()), [a], "{a:#x}");
            for b in [0u8, b'\\', b'x', b'f', 0x7f, 0x80, 0xc3, 0xa9, 0xff] {
                let v = [a, b, b'x', a];
                assert_eq!(unescape(escape(&v).as_bytes()), v, "{v:?}");
            }
        }
        assert_ne!(escape(b"n\xff"), escape(b"n\xfe"));
        assert_eq!(escape(b"n\xff"), "n\\xff");
        assert_eq!(escape("héllo".as_bytes()), "héllo");
        assert_eq!(escape(b"a\\xff"), "a\\\\xff");
        assert_eq!(unescape(b"a\\b"), b"a\\b");
        assert_eq!(unescape(b"a\\xzz"), b"a\\xzz");
        assert_eq!(unescape(b"raw\xff"), b"raw\xff");
    }
}
