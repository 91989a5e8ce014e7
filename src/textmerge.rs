//! Three-way line merge (diff3) of text files, for `avfs vault merge --conflicts=markers`.
//!
//! Both sides are diffed against the base (`linediff`: git's Histogram diff). Changed regions
//! ("hunks", in base line numbers) of the two sides that overlap or touch form one group;
//! a group changed by one side only takes that side's lines, a group both sides changed
//! identically takes them once, and any other group is a conflict, written between
//! `<<<<<<<`, `=======` and `>>>>>>>` markers (lines both sides share at the start or end
//! of a conflict are kept outside the markers). Adjacent changes conflict, as in git.

use crate::linediff::lines;

/// The merged text and how many conflict regions it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextMerge {
    pub text: String,
    pub conflicts: usize,
}

#[derive(Clone, Copy, Debug)]
struct Hunk {
    /// 0 for ours, 1 for theirs.
    side: usize,
    b0: usize,
    b1: usize,
    s0: usize,
    s1: usize,
}

/// The changed regions of `side` against `base`.
fn hunks(base: &[&str], side: &[&str], which: usize) -> Vec<Hunk> {
    crate::linediff::hunks(base, side)
        .into_iter()
        .map(|h| Hunk {
            side: which,
            b0: h.old.start,
            b1: h.old.end,
            s0: h.new.start,
            s1: h.new.end,
        })
        .collect()
}

fn push_lines(out: &mut String, ls: &[&str]) {
    for l in ls {
        out.push_str(l);
    }
}

/// Pushes `ls` and makes sure the text ends with a newline (a marker line follows).
fn push_block(out: &mut String, ls: &[&str]) {
    push_lines(out, ls);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
}

/// Merges `ours` and `theirs`, both descended from `base`.
pub fn merge3(
    base: &str,
    ours: &str,
    theirs: &str,
    ours_label: &str,
    theirs_label: &str,
) -> TextMerge {
    let (b, o, t) = (lines(base), lines(ours), lines(theirs));
    let mut all = hunks(&b, &o, 0);
    all.extend(hunks(&b, &t, 1));
    all.sort_by_key(|h| (h.b0, h.b1, h.side));
    let mut out = String::with_capacity(ours.len().max(theirs.len()));
    let mut conflicts = 0;
    // Lines each side has gained (or lost) before the current position.
    let mut delta = [0isize; 2];
    let mut pos = 0;
    let mut i = 0;
    while i < all.len() {
        let (g0, mut g1) = (all[i].b0, all[i].b1);
        let mut j = i + 1;
        while j < all.len() && all[j].b0 <= g1 {
            g1 = g1.max(all[j].b1);
            j += 1;
        }
        let group = &all[i..j];
        push_lines(&mut out, &b[pos..g0]);
        pos = g1;
        let mut range = [(0usize, 0usize); 2];
        let mut touched = [false; 2];
        for s in 0..2 {
            let grow: isize = group
                .iter()
                .filter(|h| h.side == s)
                .map(|h| (h.s1 - h.s0) as isize - (h.b1 - h.b0) as isize)
                .sum();
            touched[s] = group.iter().any(|h| h.side == s);
            let start = (g0 as isize + delta[s]) as usize;
            let end = (g1 as isize + delta[s] + grow) as usize;
            range[s] = (start, end);
            delta[s] += grow;
        }
        let ours_part = &o[range[0].0..range[0].1];
        let theirs_part = &t[range[1].0..range[1].1];
        match touched {
            [true, false] => push_lines(&mut out, ours_part),
            [false, true] => push_lines(&mut out, theirs_part),
            _ if ours_part == theirs_part => push_lines(&mut out, ours_part),
            _ => {
                // Lines both sides agree on at either end stay outside the markers.
                let head = ours_part
                    .iter()
                    .zip(theirs_part.iter())
                    .take_while(|(x, y)| x == y)
                    .count();
                let max_tail = ours_part.len().min(theirs_part.len()) - head;
                let tail = ours_part
                    .iter()
                    .rev()
                    .zip(theirs_part.iter().rev())
                    .take(max_tail)
                    .take_while(|(x, y)| x == y)
                    .count();
                push_block(&mut out, &ours_part[..head]);
                out.push_str(&format!("<<<<<<< {ours_label}\n"));
                push_block(&mut out, &ours_part[head..ours_part.len() - tail]);
                out.push_str("=======\n");
                push_block(&mut out, &theirs_part[head..theirs_part.len() - tail]);
                out.push_str(&format!(">>>>>>> {theirs_label}\n"));
                push_lines(&mut out, &ours_part[ours_part.len() - tail..]);
                conflicts += 1;
            }
        }
        i = j;
    }
    push_lines(&mut out, &b[pos..]);
    TextMerge {
        text: out,
        conflicts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(base: &str, ours: &str, theirs: &str) -> TextMerge {
        merge3(base, ours, theirs, "ours", "theirs")
    }

    #[test]
    fn changes_far_apart_merge_cleanly() {
        let base = "a\nb\nc\nd\ne\n";
        let r = m(base, "A\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n");
        assert_eq!(r.text, "A\nb\nc\nd\nE\n");
        assert_eq!(r.conflicts, 0);
    }

    #[test]
    fn one_side_only_and_identical_changes() {
        let base = "a\nb\nc\n";
        assert_eq!(m(base, base, "a\nB\nc\n").text, "a\nB\nc\n");
        assert_eq!(m(base, "a\nB\nc\n", base).text, "a\nB\nc\n");
        let r = m(base, "a\nB\nc\nx\n", "a\nB\nc\nx\n");
        assert_eq!(r.text, "a\nB\nc\nx\n");
        assert_eq!(r.conflicts, 0);
    }

    #[test]
    fn overlapping_changes_get_markers() {
        let base = "one\ntwo\nthree\n";
        let r = m(
            base,
            "one\nTWO (ours)\nthree\n",
            "one\nTWO (theirs)\nthree\n",
        );
        assert_eq!(
            r.text,
            "one\n<<<<<<< ours\nTWO (ours)\n=======\nTWO (theirs)\n>>>>>>> theirs\nthree\n"
        );
        assert_eq!(r.conflicts, 1);
    }

    #[test]
    fn adjacent_changes_conflict_and_shared_lines_stay_outside() {
        let base = "a\nb\nc\n";
        let r = m(base, "a\nB1\nC\n", "a\nB2\nC\n");
        assert_eq!(
            r.text,
            "a\n<<<<<<< ours\nB1\n=======\nB2\n>>>>>>> theirs\nC\n"
        );
        assert_eq!(r.conflicts, 1);
    }

    #[test]
    fn insertions_at_the_same_place() {
        let r = m("a\nz\n", "a\nours\nz\n", "a\ntheirs\nz\n");
        assert_eq!(
            r.text,
            "a\n<<<<<<< ours\nours\n=======\ntheirs\n>>>>>>> theirs\nz\n"
        );
        // The same insertion on both sides is no conflict.
        assert_eq!(m("a\nz\n", "a\nx\nz\n", "a\nx\nz\n").text, "a\nx\nz\n");
    }

    #[test]
    fn delete_against_modify_conflicts() {
        let r = m("a\nb\nc\n", "a\nc\n", "a\nB\nc\n");
        assert_eq!(r.text, "a\n<<<<<<< ours\n=======\nB\n>>>>>>> theirs\nc\n");
        assert_eq!(r.conflicts, 1);
    }

    /// Random edits of random texts: never a panic, and the merge of one side with an
    /// unchanged other side (or of two equal sides) is that side, without conflict.
    #[test]
    fn random_edits_keep_the_basic_laws() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let words = ["a\n", "b\n", "c\n", "d\n", "e", "\n"];
        for _ in 0..2000 {
            let len = next(12) as usize;
            let base: Vec<&str> = (0..len).map(|_| words[next(6) as usize]).collect();
            let mut edit = |v: &Vec<&str>| {
                let mut v = v.clone();
                for _ in 0..next(4) {
                    let at = next(v.len() as u64 + 1) as usize;
                    match next(3) {
                        0 => v.insert(at, words[next(6) as usize]),
                        1 if at < v.len() => {
                            v.remove(at);
                        }
                        _ if at < v.len() => v[at] = words[next(6) as usize],
                        _ => {}
                    }
                }
                v.concat()
            };
            let (o, t, b) = (edit(&base), edit(&base), base.concat());
            let r = m(&b, &o, &t);
            if o == b {
                assert_eq!(
                    (r.text.as_str(), r.conflicts),
                    (t.as_str(), 0),
                    "{b:?} {o:?} {t:?}"
                );
            }
            if t == b || t == o {
                assert_eq!(
                    (r.text.as_str(), r.conflicts),
                    (o.as_str(), 0),
                    "{b:?} {o:?} {t:?}"
                );
            }
            if r.conflicts == 0 {
                assert!(!r.text.contains("<<<<<<<"));
            }
        }
    }

    #[test]
    fn empty_base_and_missing_final_newline() {
        let r = m("", "same\nours", "same\ntheirs");
        assert_eq!(
            r.text,
            "same\n<<<<<<< ours\nours\n=======\ntheirs\n>>>>>>> theirs\n"
        );
        // Several separate hunks, kept in order with the right offsets.
        let base = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let ours = "0\n1\n2\n3\n5\n6\n7\n8\n9\n";
        let theirs = "1\n2\n3\n4\n5\n6\nsix-and-a-half\n7\n8\n9\nten\n";
        let r = m(base, ours, theirs);
        assert_eq!(r.conflicts, 0);
        assert_eq!(r.text, "0\n1\n2\n3\n5\n6\nsix-and-a-half\n7\n8\n9\nten\n");
    }
}
