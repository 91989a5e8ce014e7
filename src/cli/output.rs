//! Printing results: one JSON document on stdout with `--json`, text for people otherwise.

use serde::Serialize;

use crate::error::Error;

/// Documented exit codes (see docs/cli.md).
pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

pub struct Out {
    pub json: bool,
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
        } else {
            human();
        }
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
