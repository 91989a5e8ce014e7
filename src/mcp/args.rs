//! Turning a tool call into an `avfs` command line, and its content into bytes.

use std::ffi::OsString;

use rmcp::ErrorData as McpError;

/// Builds a command line: options as `--name=value` so no value is ever read as a flag,
/// positionals after `--` so no path is either.
#[derive(Default)]
pub(super) struct Line {
    pub(super) args: Vec<OsString>,
    pub(super) positional: Vec<OsString>,
    pub(super) stdin: Option<Vec<u8>>,
}

impl Line {
    pub(super) fn new(words: &[&str]) -> Line {
        Line {
            args: words.iter().map(OsString::from).collect(),
            ..Line::default()
        }
    }
    pub(super) fn flag(mut self, name: &str, on: bool) -> Line {
        if on {
            self.args.push(name.into());
        }
        self
    }
    pub(super) fn opt(mut self, name: &str, value: Option<impl ToString>) -> Line {
        if let Some(v) = value {
            self.args.push(format!("--{name}={}", v.to_string()).into());
        }
        self
    }
    /// The command to run: a shell line (`--shell`) or an argv (after `--`), exactly one;
    /// neither only when `may_omit` (an approval carries its own command).
    pub(super) fn command(
        mut self,
        command: Option<String>,
        argv: Option<Vec<String>>,
        may_omit: bool,
    ) -> Result<Line, McpError> {
        match (command, argv) {
            (Some(sh), None) => Ok(self.opt("shell", Some(sh))),
            (None, Some(argv)) if !argv.is_empty() => {
                self.positional = argv.into_iter().map(OsString::from).collect();
                Ok(self)
            }
            (None, None) if may_omit => Ok(self),
            _ => Err(super::badargs::bad_arg(
                "command",
                "give exactly one of `command` (a shell line) or `argv` (a non-empty list)",
                "pass `command` as a string, or `argv` as a non-empty list of strings, not both",
            )),
        }
    }

    /// A positional word before `--` (for commands whose `--` starts something else).
    pub(super) fn word(mut self, value: Option<impl Into<OsString>>) -> Line {
        if let Some(v) = value {
            self.args.push(v.into());
        }
        self
    }
    pub(super) fn pos(mut self, value: Option<impl Into<OsString>>) -> Line {
        if let Some(v) = value {
            self.positional.push(v.into());
        }
        self
    }
}

/// Turns `content` in `encoding` into bytes.
pub(super) fn decode_content(content: &str, encoding: Option<&str>) -> Result<Vec<u8>, McpError> {
    let bad = |what: String| {
        super::badargs::bad_arg(
            "content",
            what,
            "give `content` in the `encoding` you name (utf-8, base64 or hex)",
        )
    };
    match encoding.unwrap_or("utf-8") {
        "utf-8" | "utf8" | "text" => Ok(content.as_bytes().to_vec()),
        "base64" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(content.trim())
                .map_err(|e| bad(format!("content is not valid base64: {e}")))
        }
        "hex" => {
            let s = content.trim();
            if !s.len().is_multiple_of(2) {
                return Err(bad("hex content has an odd number of digits".into()));
            }
            (0..s.len())
                .step_by(2)
                .map(|i| {
                    s.get(i..i + 2)
                        .and_then(|d| u8::from_str_radix(d, 16).ok())
                        .ok_or_else(|| bad(format!("content is not hex at byte {}", i / 2)))
                })
                .collect()
        }
        other => Err(super::badargs::bad_arg(
            "encoding",
            format!("unknown encoding {other:?}"),
            "use utf-8, base64 or hex",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::decode_content;

    #[test]
    fn content_encodings_decode_or_say_why_not() {
        assert_eq!(decode_content("hé", None).unwrap(), "hé".as_bytes());
        assert_eq!(decode_content("00ff10", Some("hex")).unwrap(), [0, 255, 16]);
        assert_eq!(
            decode_content("AP8Q", Some("base64")).unwrap(),
            [0, 255, 16]
        );
        for (content, enc) in [
            ("0", "hex"),
            ("zz", "hex"),
            ("!!", "base64"),
            ("x", "rot13"),
        ] {
            let e = decode_content(content, Some(enc)).unwrap_err();
            assert!(!e.message.is_empty(), "{content} {enc}");
        }
    }
}
