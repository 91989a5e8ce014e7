//! Bash's brace expansion (`a{b,c}`, `{1..3}`) of one raw word, bounded: the grammar
//! expands words with it before lowering them.

use super::grammar::ParseError;

/// Most words one brace expansion may produce before the line is not read.
const MAX_BRACE_WORDS: usize = 256;

/// Bash's brace expansion of one raw word (`a{b,c}d`, `{1..3}`, `{a..c}`, nested):
/// the words it becomes, in order, with quotes kept for the word parser. Quoted text,
/// `${...}` and `$(...)` are left alone. `Err` when it would make too many words.
pub fn brace_expand(word: &str) -> Result<Vec<String>, ParseError> {
    let b = word.as_bytes();
    // Find the first unquoted `{` with a matching `}` that holds a top-level `,` or `..`.
    let (mut i, mut quote) = (0usize, 0u8);
    while i < b.len() {
        let c = b[i];
        match (quote, c) {
            (0, b'\\') => {
                i += 2;
                continue;
            }
            (0, b'\'' | b'"') => quote = c,
            (q, _) if q != 0 && c == q => quote = 0,
            (b'"', b'\\') => {
                i += 2;
                continue;
            }
            (0, b'$') if b.get(i + 1).is_some_and(|n| *n == b'{' || *n == b'(') => {
                // Skip the whole `${...}` / `$(...)`.
                let (open, close) = if b[i + 1] == b'{' {
                    (b'{', b'}')
                } else {
                    (b'(', b')')
                };
                let mut depth = 0;
                let mut j = i + 1;
                while j < b.len() {
                    if b[j] == open {
                        depth += 1;
                    } else if b[j] == close {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    j += 1;
                }
                i = j + 1;
                continue;
            }
            (0, b'{') => {
                if let Some((end, parts)) = brace_parts(word, i) {
                    let (pre, post) = (&word[..i], &word[end + 1..]);
                    let mut out = Vec::new();
                    for p in parts {
                        for tail in brace_expand(&format!("{p}{post}"))? {
                            out.push(format!("{pre}{tail}"));
                            if out.len() > MAX_BRACE_WORDS {
                                return Err(ParseError(format!(
                                    "a brace expansion makes more than {MAX_BRACE_WORDS} words"
                                )));
                            }
                        }
                    }
                    return Ok(out);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(vec![word.to_string()])
}

/// The alternatives of the brace group opening at `open`, and where it closes; `None`
/// when it is not a brace expansion (`{}`, `{a}`, unmatched).
fn brace_parts(word: &str, open: usize) -> Option<(usize, Vec<String>)> {
    let b = word.as_bytes();
    let (mut depth, mut quote, mut j) = (0usize, 0u8, open);
    let mut commas = Vec::new();
    while j < b.len() {
        let c = b[j];
        match (quote, c) {
            (0, b'\\') => j += 1,
            (0, b'\'' | b'"') => quote = c,
            (q, _) if q != 0 && c == q => quote = 0,
            (0, b'{') => depth += 1,
            (0, b'}') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            (0, b',') if depth == 1 => commas.push(j),
            _ => {}
        }
        j += 1;
    }
    if j >= b.len() {
        return None;
    }
    let inner = &word[open + 1..j];
    if !commas.is_empty() {
        let mut parts = Vec::new();
        let mut from = open + 1;
        for c in commas {
            parts.push(word[from..c].to_string());
            from = c + 1;
        }
        parts.push(word[from..j].to_string());
        return Some((j, parts));
    }
    // A sequence: `{1..5}`, `{a..e}`, `{1..10..2}`.
    let seq: Vec<&str> = inner.split("..").collect();
    if seq.len() == 2 || seq.len() == 3 {
        if let (Ok(a), Ok(z)) = (seq[0].parse::<i64>(), seq[1].parse::<i64>()) {
            let step = seq
                .get(2)
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(1)
                .abs()
                .max(1);
            let n = ((a - z).abs() / step + 1) as usize;
            if n > MAX_BRACE_WORDS {
                return Some((j, vec!["${?}".into()]));
            }
            let dir = if z >= a { step } else { -step };
            return Some((
                j,
                (0..n as i64).map(|k| (a + k * dir).to_string()).collect(),
            ));
        }
        let (ca, cz) = (
            seq[0].chars().collect::<Vec<_>>(),
            seq[1].chars().collect::<Vec<_>>(),
        );
        if ca.len() == 1 && cz.len() == 1 && ca[0].is_ascii() && cz[0].is_ascii() {
            let (a, z) = (ca[0] as u8, cz[0] as u8);
            let r: Vec<String> = if a <= z {
                (a..=z).map(|c| (c as char).to_string()).collect()
            } else {
                (z..=a).rev().map(|c| (c as char).to_string()).collect()
            };
            return Some((j, r));
        }
    }
    None
}
