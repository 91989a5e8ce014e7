//! Line diffs: which lines of one text became which of another, and the unified patch that
//! says so. One algorithm for every caller (the change report's and `avfs diff`'s patches,
//! `--stat`'s line counts, the three-way text merge): imara-diff's Histogram diff, the
//! algorithm of `git diff --histogram`. It is chosen over Myers' for its cost: a file
//! rewritten end to end (no line in common) costs Myers O(N²) but Histogram about O(N),
//! and the change report diffs every edited text file up to 64 MiB. On the exec
//! benchmark's 100 rewritten files (0.2-100 KB) the diffs took 10.5 ms with Myers
//! (`similar`) against 1.7 ms here; its hunks also read better where lines repeat.

use std::fmt::Write as _;
use std::ops::Range;

use imara_diff::{Algorithm, Diff, InternedInput};

/// A changed region: lines `old` of the first text became lines `new` of the second
/// (either may be empty), as indexes into their line lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hunk {
    pub old: Range<usize>,
    pub new: Range<usize>,
}

/// The lines of `s`, each with its line end (the last may have none).
pub fn lines(s: &str) -> Vec<&str> {
    s.split_inclusive('\n').collect()
}

/// The changed regions between two lists of lines, in order. Lines compare whole,
/// line ends included (a last line that lost its newline changed).
pub fn hunks(old: &[&str], new: &[&str]) -> Vec<Hunk> {
    // The lines both share at the start and the end are left out first, as git's xdiff
    // does (`xdl_trim_ends`): an agent's edit changes a few lines of a file, and only
    // those few are then interned and diffed.
    let head = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let (old_rest, new_rest) = (&old[head..], &new[head..]);
    let tail = old_rest
        .iter()
        .rev()
        .zip(new_rest.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let old_mid = &old_rest[..old_rest.len() - tail];
    let new_mid = &new_rest[..new_rest.len() - tail];
    if old_mid.is_empty() || new_mid.is_empty() {
        // Only added or only removed lines: one hunk, nothing to align.
        return if old_mid.len() + new_mid.len() == 0 {
            vec![]
        } else {
            vec![Hunk {
                old: head..head + old_mid.len(),
                new: head..head + new_mid.len(),
            }]
        };
    }
    let mut input = InternedInput::default();
    input.update_before(old_mid.iter().copied());
    input.update_after(new_mid.iter().copied());
    let mut diff = Diff::compute(Algorithm::Histogram, &input);
    // Slides each change to where a person would put it (git's indent heuristic), so
    // an inserted function starts at its own first line, not at a shared closing brace.
    diff.postprocess_lines(&input);
    diff.hunks()
        .map(|h| Hunk {
            old: head + h.before.start as usize..head + h.before.end as usize,
            new: head + h.after.start as usize..head + h.after.end as usize,
        })
        .collect()
}

/// Lines added and removed from `old` to `new`.
pub fn counts(old: &str, new: &str) -> (u64, u64) {
    hunks(&lines(old), &lines(new))
        .iter()
        .fold((0, 0), |(a, r), h| {
            (a + h.new.len() as u64, r + h.old.len() as u64)
        })
}

/// Lines of context around each change in a patch (git's and diff's default).
const CONTEXT: usize = 3;

/// The unified diff from `old` to `new` (as `diff -u` and git print it; empty when they
/// are equal), its headers naming them `from` and `to`.
pub fn unified(old: &str, new: &str, from: &str, to: &str) -> String {
    let (a, b) = (lines(old), lines(new));
    let hs = hunks(&a, &b);
    if hs.is_empty() {
        return String::new();
    }
    let mut out = format!("--- {from}\n+++ {to}\n");
    let mut i = 0;
    while i < hs.len() {
        // Changes whose contexts meet or overlap share one hunk.
        let mut j = i + 1;
        while j < hs.len() && hs[j].old.start - hs[j - 1].old.end <= 2 * CONTEXT {
            j += 1;
        }
        let (first, last) = (&hs[i], &hs[j - 1]);
        let lead = first.old.start.min(CONTEXT);
        let trail = (a.len() - last.old.end).min(CONTEXT);
        let old_span = first.old.start - lead..last.old.end + trail;
        let new_span = first.new.start - lead..last.new.end + trail;
        let _ = writeln!(out, "@@ -{} +{} @@", span(&old_span), span(&new_span));
        let mut at = old_span.start;
        for h in &hs[i..j] {
            for l in &a[at..h.old.start] {
                line(&mut out, ' ', l);
            }
            for l in &a[h.old.clone()] {
                line(&mut out, '-', l);
            }
            for l in &b[h.new.clone()] {
                line(&mut out, '+', l);
            }
            at = h.old.end;
        }
        for l in &a[at..old_span.end] {
            line(&mut out, ' ', l);
        }
        i = j;
    }
    out
}

/// A hunk header's range: `start,count` with `start` 1-based, the count left out when it
/// is 1, and an empty range named by the line before it (0 at the top), as diff does.
fn span(r: &Range<usize>) -> String {
    match r.len() {
        0 => format!("{},0", r.start),
        1 => format!("{}", r.start + 1),
        n => format!("{},{n}", r.start + 1),
    }
}

fn line(out: &mut String, mark: char, l: &str) {
    out.push(mark);
    out.push_str(l);
    if !l.ends_with('\n') {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_read_as_diff_u_prints_them() {
        let p = |o, n| unified(o, n, "a/f", "b/f");
        assert_eq!(p("x\n", "x\n"), "");
        assert_eq!(p("", "hi\n"), "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+hi\n");
        assert_eq!(p("old\n", ""), "--- a/f\n+++ b/f\n@@ -1 +0,0 @@\n-old\n");
        assert_eq!(
            p("hi\n", "hi\nbye\n"),
            "--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n hi\n+bye\n"
        );
        assert_eq!(
            p("a\nb\nc", "a\nB\nc"),
            "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\\ No newline at end of file\n"
        );
        assert_eq!(
            p("a\nb\n", "a\nb"),
            "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn near_changes_share_a_hunk_and_far_ones_do_not() {
        let old: String = (0..40).map(|i| format!("{i}\n")).collect();
        let edit = |at: &[usize]| -> String {
            (0..40)
                .map(|i| {
                    if at.contains(&i) {
                        format!("x{i}\n")
                    } else {
                        format!("{i}\n")
                    }
                })
                .collect()
        };
        // 6 unchanged lines between: the two contexts meet, one hunk.
        let one = unified(&old, &edit(&[10, 17]), "a", "b");
        assert_eq!(one.matches("@@ -").count(), 1, "{one}");
        assert!(one.contains("@@ -8,14 +8,14 @@"), "{one}");
        // 7 between: two hunks.
        let two = unified(&old, &edit(&[10, 18]), "a", "b");
        assert_eq!(two.matches("@@ -").count(), 2, "{two}");
        assert!(
            two.contains("@@ -8,7 +8,7 @@") && two.contains("@@ -16,7 +16,7 @@"),
            "{two}"
        );
        // At the very ends, the context is what there is.
        let ends = unified(&old, &edit(&[0, 39]), "a", "b");
        assert!(
            ends.contains("@@ -1,4 +1,4 @@") && ends.contains("@@ -37,4 +37,4 @@"),
            "{ends}"
        );
    }

    #[test]
    fn a_rewritten_file_is_one_hunk_of_every_line() {
        let old: String = (0..5000).map(|i| format!("old {i}\n")).collect();
        let new: String = (0..5000).map(|i| format!("new {i}\n")).collect();
        assert_eq!(counts(&old, &new), (5000, 5000));
        let p = unified(&old, &new, "a", "b");
        assert!(p.starts_with("--- a\n+++ b\n@@ -1,5000 +1,5000 @@\n-old 0\n"));
        assert_eq!(p.lines().filter(|l| l.starts_with('-')).count(), 5001);
    }

    #[test]
    fn applying_a_patch_gives_the_new_text() {
        // A tiny `patch`: enough to check the hunks' numbers and lines are consistent.
        fn apply(old: &str, patch: &str) -> String {
            let a = lines(old);
            let mut out = String::new();
            let mut at = 0;
            let mut body = patch.lines().skip(2).peekable();
            while let Some(h) = body.next() {
                let old_range = h[4..].split(' ').next().unwrap();
                let mut nums = old_range.split(',').map(|x| x.parse::<usize>().unwrap());
                let (start, count) = (nums.next().unwrap(), nums.next().unwrap_or(1));
                // An empty range names the line before it.
                let start = if count == 0 { start } else { start - 1 };
                a[at..start].iter().for_each(|l| out.push_str(l));
                at = start;
                while let Some(l) = body.next_if(|l| !l.starts_with("@@")) {
                    let no_eol = body.next_if(|n| n.starts_with('\\')).is_some();
                    let text = if no_eol {
                        l[1..].to_string()
                    } else {
                        format!("{}\n", &l[1..])
                    };
                    match &l[..1] {
                        " " => {
                            out.push_str(&text);
                            at += 1;
                        }
                        "-" => at += 1,
                        _ => out.push_str(&text),
                    }
                }
            }
            a[at..].iter().for_each(|l| out.push_str(l));
            out
        }
        let mut seed = 7u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300 {
            let words = ["a\n", "b\n", "c\n", "}\n", "\n", "fn x\n", "end"];
            let mut text = || -> String {
                let n = next() % 30;
                let mut s: String = (0..n).map(|_| words[(next() % 6) as usize]).collect();
                if next() % 4 == 0 {
                    s.push_str(words[6]);
                }
                s
            };
            let (o, n) = (text(), text());
            let p = unified(&o, &n, "a", "b");
            assert_eq!(apply(&o, &p), n, "old {o:?} new {n:?}\n{p}");
        }
    }
}
