//! Printing results: one JSON document on stdout with `--json`, text for people otherwise.

use std::io::IsTerminal;

use serde::Serialize;

use crate::error::Error;

pub use crate::error::{EXIT_ERROR, EXIT_OK, EXIT_USAGE};

pub struct Out {
    pub json: bool,
    /// `--quiet`: no progress and no human summaries (errors still go to stderr).
    pub quiet: bool,
}

/// A rate for people: `812/s`, `12.9k/s`, `3.4M/s` (indicatif's own prints
/// `12,867.1816/s`).
pub fn rate(per_sec: f64) -> String {
    if !per_sec.is_finite() || per_sec < 0.0 {
        return "-/s".into();
    }
    if per_sec >= 1e6 {
        format!("{:.1}M/s", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1}k/s", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}/s")
    }
}

impl Out {
    /// Prints `value` as JSON, or runs `human` to print text.
    pub fn emit<T: Serialize>(&self, value: &T, human: impl FnOnce()) {
        if self.json {
            match serde_json::to_string_pretty(value) {
                Ok(text) => println!("{text}"),
                Err(e) => {
                    let msg = format!("cannot print the result as JSON: {e}");
                    let v = serde_json::json!({"error": {"kind": "internal", "message": msg, "exit_code": EXIT_ERROR}});
                    println!("{v}");
                }
            }
        } else if !self.quiet {
            human();
        }
    }

    /// Colours on stdout: only on a terminal, never with `--json`, and not when `NO_COLOR`
    /// is set to anything but an empty string (no-color.org).
    pub fn paint(&self) -> Paint {
        Paint {
            on: !self.json && std::io::stdout().is_terminal() && !no_color(),
        }
    }

    /// Colours for text written to stderr (same rules, judged on stderr).
    pub fn paint_stderr(&self) -> Paint {
        Paint {
            on: !self.json && std::io::stderr().is_terminal() && !no_color(),
        }
    }

    /// A progress bar on stderr for long work, only when stderr is a terminal and there is
    /// no `--json`. `len` gives a bar, `None` a spinner.
    pub fn progress(&self, len: Option<u64>, what: &str) -> Option<indicatif::ProgressBar> {
        if self.json || self.quiet || !std::io::stderr().is_terminal() {
            return None;
        }
        let (pb, template) = match len {
            Some(n) => (
                indicatif::ProgressBar::new(n),
                "{msg} [{bar:30}] {pos}/{len} ({eta})",
            ),
            None => (
                indicatif::ProgressBar::new_spinner(),
                "{spinner} {msg} {pos} ({rate}, {elapsed})",
            ),
        };
        pb.set_style(
            indicatif::ProgressStyle::with_template(template)
                .expect("progress template")
                .with_key(
                    "rate",
                    |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = w.write_str(&rate(s.per_sec()));
                    },
                )
                .progress_chars("=> "),
        );
        pb.set_message(what.to_string());
        pb.enable_steady_tick(std::time::Duration::from_millis(120));
        Some(pb)
    }

    pub fn error(&self, e: &Error) -> i32 {
        if self.json {
            let v = serde_json::json!({"error": {"kind": e.kind(), "message": e.to_string(), "exit_code": EXIT_ERROR}});
            println!("{}", serde_json::to_string_pretty(&v).unwrap());
        } else {
            eprintln!("avfs: error: {e}");
        }
        EXIT_ERROR
    }
}

pub fn format_mode(st_mode: u32) -> String {
    let t = match st_mode & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'l',
        libc::S_IFIFO => 'p',
        libc::S_IFSOCK => 's',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        _ => '-',
    };
    let mut s = String::from(t);
    let bits = [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o40, 'r'),
        (0o20, 'w'),
        (0o10, 'x'),
        (0o4, 'r'),
        (0o2, 'w'),
        (0o1, 'x'),
    ];
    for (i, (b, c)) in bits.iter().enumerate() {
        let mut ch = if st_mode & b != 0 { *c } else { '-' };
        let special = match i {
            2 if st_mode & 0o4000 != 0 => Some('s'),
            5 if st_mode & 0o2000 != 0 => Some('s'),
            8 if st_mode & 0o1000 != 0 => Some('t'),
            _ => None,
        };
        if let Some(sp) = special {
            ch = if ch == '-' {
                sp.to_ascii_uppercase()
            } else {
                sp
            };
        }
        s.push(ch);
    }
    s
}

pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// ANSI colours, or plain text when colours are off.
#[derive(Clone, Copy, Debug)]
pub struct Paint {
    pub on: bool,
}

impl Paint {
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub fn path(&self, s: &str) -> String {
        self.wrap("35", s)
    }
    pub fn line_no(&self, s: &str) -> String {
        self.wrap("32", s)
    }
    pub fn matched(&self, s: &str) -> String {
        self.wrap("1;31", s)
    }
    pub fn good(&self, s: &str) -> String {
        self.wrap("32", s)
    }
    pub fn bad(&self, s: &str) -> String {
        self.wrap("31", s)
    }
    pub fn warn(&self, s: &str) -> String {
        self.wrap("33", s)
    }
    pub fn dim(&self, s: &str) -> String {
        self.wrap("2", s)
    }
    /// A change sigil (A, M, D, T, P, X) in its colour.
    pub fn sigil(&self, s: &str) -> String {
        match s {
            "A" => self.good(s),
            "D" => self.bad(s),
            _ => self.warn(s),
        }
    }
}

/// Prints a list as it is produced, one item at a time, for listings too large to hold
/// (`ls` of a million entries): text lines, or with `--json` the document `emit` would
/// print for `{KEY: [items...], other fields...}`, byte for byte, written as it goes.
/// Keys are printed in sorted order as `emit` prints them, so the other fields must sort
/// after `KEY`.
pub struct ListStream<W: std::io::Write> {
    out: W,
    json: bool,
    key: &'static str,
    items: u64,
}

impl<W: std::io::Write> ListStream<W> {
    pub fn new(out: W, json: bool, key: &'static str) -> ListStream<W> {
        ListStream {
            out,
            json,
            key,
            items: 0,
        }
    }

    /// One item: its JSON, or the text `human` writes. `T` must serialize its keys in
    /// sorted order (as `emit` prints every object), or go through a `serde_json::Value`.
    pub fn item<T: Serialize>(
        &mut self,
        v: &T,
        human: impl FnOnce(&mut W) -> std::io::Result<()>,
    ) -> crate::error::Result<()> {
        let r = if self.json {
            let text = serde_json::to_string_pretty(v)
                .map_err(|e| Error::Internal(format!("cannot print JSON: {e}")))?;
            let sep = if self.items == 0 {
                format!(
                    "{{\n  {}: [\n",
                    serde_json::to_string(self.key).unwrap_or_default()
                )
            } else {
                ",\n".to_string()
            };
            self.out
                .write_all(sep.as_bytes())
                .and_then(|_| self.out.write_all(b"    "))
                .and_then(|_| self.out.write_all(text.replace('\n', "\n    ").as_bytes()))
        } else {
            human(&mut self.out)
        };
        self.items += 1;
        r.map_err(|e| Error::host("stdout", e))
    }

    fn close_list(&mut self) -> std::io::Result<()> {
        if !self.json {
            return Ok(());
        }
        let key = serde_json::to_string(self.key).unwrap_or_default();
        if self.items == 0 {
            write!(self.out, "{{\n  {key}: []")
        } else {
            write!(self.out, "\n  ]")
        }
    }

    fn tail(&mut self, fields: &[(&str, serde_json::Value)]) -> std::io::Result<()> {
        for (k, v) in fields {
            let text = serde_json::to_string_pretty(v).unwrap_or_default();
            write!(
                self.out,
                ",\n  {}: {}",
                serde_json::to_string(k).unwrap_or_default(),
                text.replace('\n', "\n  ")
            )?;
        }
        writeln!(self.out, "\n}}")
    }

    /// Ends the list and prints the other fields.
    pub fn finish(mut self, fields: &[(&str, serde_json::Value)]) -> crate::error::Result<()> {
        let r = (|| {
            self.close_list()?;
            if self.json {
                self.tail(fields)?;
            }
            self.out.flush()
        })();
        r.map_err(|e| Error::host("stdout", e))
    }

    /// Ends the list with an error. Before any item this is the usual error document (the
    /// error is returned for the caller to print); after one, the items printed are
    /// followed by the error, as `"error": {"kind", "message", "exit_code"}` in the same
    /// document, and the exit code is returned.
    pub fn fail(
        mut self,
        e: Error,
        fields: &[(&str, serde_json::Value)],
    ) -> crate::error::Result<i32> {
        if self.items == 0 {
            return Err(e);
        }
        let _ = self.out.flush();
        if !self.json {
            eprintln!("avfs: error: {e}");
            return Ok(EXIT_ERROR);
        }
        let err = serde_json::json!({"kind": e.kind(), "message": e.to_string(), "exit_code": EXIT_ERROR});
        let mut all: Vec<(&str, serde_json::Value)> = vec![("error", err)];
        all.extend(fields.iter().cloned());
        all.sort_by(|a, b| a.0.cmp(b.0));
        let _ = self.close_list().and_then(|_| self.tail(&all));
        let _ = self.out.flush();
        Ok(EXIT_ERROR)
    }
}
