//! MCP resources: the server's workspace as things a client can list and read without a
//! tool call (an MCP host shows them to the person, or attaches them to the context).
//!
//! * `avfs://checkpoints`: the document of `avfs checkpoint list` (JSON).
//! * `avfs://files/PATH`: a file of the live workspace.
//! * `avfs://checkpoints/NAME/files/PATH`: a file as it was at a checkpoint.
//!
//! Text comes back as text, anything else as a base64 blob. PATH is percent-encoded where
//! it is not a URI character (a space is `%20`). Listing names every regular file, up to
//! [`MAX_LISTED`]; the templates reach every other one.

use rmcp::ErrorData as McpError;
use rmcp::model::{Resource, ResourceContents, ResourceTemplate};
use serde_json::Value;

use super::args::Line;

/// At most this many files are listed: a model's context is no place for a whole tree.
pub(super) const MAX_LISTED: usize = 500;

pub(super) const CHECKPOINTS: &str = "avfs://checkpoints";
const FILES: &str = "avfs://files";

/// What a resource URI names.
#[derive(Debug, PartialEq)]
pub(super) enum Target {
    Checkpoints,
    File { path: String, at: Option<String> },
}

/// Parses a resource URI, or says which forms there are.
pub(super) fn parse(uri: &str) -> Result<Target, McpError> {
    let bad = || {
        McpError::resource_not_found(
            format!(
                "no such resource {uri:?}: use {CHECKPOINTS}, {FILES}/PATH or \
                 {CHECKPOINTS}/NAME/files/PATH (resources/list names them)"
            ),
            None,
        )
    };
    if uri == CHECKPOINTS {
        return Ok(Target::Checkpoints);
    }
    if let Some(rest) = uri.strip_prefix(FILES)
        && rest.starts_with('/')
    {
        return Ok(Target::File {
            path: decode(rest).ok_or_else(bad)?,
            at: None,
        });
    }
    if let Some(rest) = uri
        .strip_prefix(CHECKPOINTS)
        .and_then(|r| r.strip_prefix('/'))
        && let Some((name, path)) = rest.split_once("/files/")
        && !name.is_empty()
    {
        return Ok(Target::File {
            path: decode(&format!("/{path}")).ok_or_else(bad)?,
            at: Some(decode(name).ok_or_else(bad)?),
        });
    }
    Err(bad())
}

/// The command line that reads a target.
pub(super) fn line(t: &Target) -> Line {
    match t {
        Target::Checkpoints => Line::new(&["checkpoint", "list"]),
        Target::File { path, at } => Line::new(&["cat"])
            .opt("at", at.clone())
            .pos(Some(path.clone())),
    }
}

/// The resource contents of a target's document.
pub(super) fn contents(uri: &str, t: &Target, doc: Value) -> ResourceContents {
    match t {
        Target::Checkpoints => {
            ResourceContents::text(doc.to_string(), uri).with_mime_type("application/json")
        }
        Target::File { .. } => {
            let content = doc.get("content").and_then(Value::as_str).unwrap_or("");
            if doc.get("encoding").and_then(Value::as_str) == Some("hex") {
                use base64::Engine;
                let bytes: Vec<u8> = (0..content.len() / 2)
                    .filter_map(|i| u8::from_str_radix(&content[2 * i..2 * i + 2], 16).ok())
                    .collect();
                ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(bytes), uri)
                    .with_mime_type("application/octet-stream")
            } else {
                ResourceContents::text(content, uri)
            }
        }
    }
}

/// The listed resources: the checkpoint list, then the files `find` printed.
pub(super) fn listed(find_doc: &Value) -> Vec<Resource> {
    let mut out = vec![
        Resource::new(CHECKPOINTS, "checkpoints")
            .with_description("The workspace's checkpoints, oldest first, and the head (JSON).")
            .with_mime_type("application/json"),
    ];
    let entries = find_doc
        .get("entries")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for e in entries.take(MAX_LISTED) {
        let Some(path) = e.get("path").and_then(Value::as_str) else {
            continue;
        };
        let mut r = Resource::new(format!("{FILES}{}", encode(path)), path);
        r.size = e.get("size").and_then(Value::as_u64);
        out.push(r);
    }
    out
}

pub(super) fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{FILES}{{+path}}"), "file")
            .with_description("A file of the live workspace (PATH absolute, e.g. /src/main.rs)."),
        ResourceTemplate::new(
            format!("{CHECKPOINTS}/{{checkpoint}}/files{{+path}}"),
            "file at a checkpoint",
        )
        .with_description("A file as it was at a checkpoint."),
    ]
}

/// Percent-encodes what is not an unreserved URI character or `/`.
fn encode(path: &str) -> String {
    let mut s = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// Undoes [`encode`] (any `%XX`); `None` for a malformed escape or bytes not UTF-8.
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_and_paths_round_trip() {
        assert_eq!(parse("avfs://checkpoints").unwrap(), Target::Checkpoints);
        assert_eq!(
            parse("avfs://files/src/a%20b.txt").unwrap(),
            Target::File {
                path: "/src/a b.txt".into(),
                at: None
            }
        );
        assert_eq!(
            parse("avfs://checkpoints/v1/files/x/y").unwrap(),
            Target::File {
                path: "/x/y".into(),
                at: Some("v1".into())
            }
        );
        for bad in [
            "avfs://nope",
            "avfs://files",
            "avfs://checkpoints//files/x",
            "avfs://files/%zz",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let odd = "/dir/ä b%#?.txt";
        let uri = format!("{FILES}{}", encode(odd));
        assert_eq!(
            parse(&uri).unwrap(),
            Target::File {
                path: odd.into(),
                at: None
            }
        );
    }
}
