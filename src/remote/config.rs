//! Remote URLs and the settings that go with them.
//!
//! A remote is named in the vault by its URL alone: `s3://bucket[/prefix]` or
//! `file:///absolute/dir`. Endpoint, region and credentials come from the environment
//! (the usual `AWS_*` variables) and from `$AVFS_HOME/remotes.toml`, never from the vault,
//! so copying a vault never copies a secret.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    S3 { bucket: String, prefix: String },
    Local { dir: PathBuf },
}

fn bad_url(url: &str, why: &str) -> Error {
    // A URL with credentials in it is not echoed back: the message names the problem only.
    let shown = if url.contains('@') {
        "(the URL given)".to_string()
    } else {
        url.to_string()
    };
    Error::InvalidArgument(shown, why.to_string())
}

/// Parses and checks a remote URL.
pub fn parse_url(url: &str) -> Result<Location> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let rest = rest.trim_end_matches('/');
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.contains('@') || bucket.contains(':') {
            return Err(bad_url(
                url,
                "credentials do not belong in a remote URL (they would be stored in the vault); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or $AVFS_HOME/remotes.toml",
            ));
        }
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !bucket_ok {
            return Err(bad_url(
                url,
                "an S3 bucket name is 3-63 characters of lowercase letters, digits, '-' and '.'",
            ));
        }
        let odd_component = |c: &str| c.is_empty() || c == "." || c == "..";
        if url.contains('?')
            || url.contains('#')
            || (!prefix.is_empty() && prefix.split('/').any(odd_component))
        {
            return Err(bad_url(
                url,
                "the prefix must be plain path components, no query",
            ));
        }
        return Ok(Location::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        });
    }
    if let Some(rest) = url.strip_prefix("file://") {
        if !rest.starts_with('/') {
            return Err(bad_url(
                url,
                "a file URL names an absolute directory: file:///dir",
            ));
        }
        let dir = PathBuf::from(rest.trim_end_matches('/'));
        if dir
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(bad_url(url, "no '..' in a file URL"));
        }
        return Ok(Location::Local {
            dir: if dir.as_os_str().is_empty() {
                PathBuf::from("/")
            } else {
                dir
            },
        });
    }
    Err(bad_url(
        url,
        "a remote URL is s3://bucket[/prefix] or file:///dir",
    ))
}

/// Connection settings for an S3 remote. Everything optional: a public bucket on AWS
/// needs none.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    /// Move refs on this store even when it fails the conditional-write probe: only one
    /// machine ever pushes to it (see `remote::probe`).
    pub single_writer: Option<bool>,
    /// Milliseconds to wait after a ref write before reading it back (`remote::refs`).
    pub settle_ms: Option<u64>,
    #[serde(skip)]
    pub retries: usize,
}

/// How long a push waits after writing a ref before it reads it back, when neither
/// `AVFS_REMOTE_SETTLE_MS` nor the remotes file says: long enough for a racing write that
/// passed a store's non-atomic condition check with ours to land (docs/remote.md).
pub const DEFAULT_SETTLE_MS: u64 = 50;

impl Settings {
    pub fn settle(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.settle_ms.unwrap_or(DEFAULT_SETTLE_MS))
    }
}

#[derive(Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    s3: std::collections::BTreeMap<String, Settings>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The settings for bucket `bucket`: environment variables win over the file's
/// `[s3.BUCKET]` section, which wins over its `[s3.default]` section.
pub fn settings_for(home: &Path, location: &Location) -> Result<Settings> {
    let Location::S3 { bucket, .. } = location else {
        // A directory remote's refs swap under a lock: nothing to wait for.
        return Ok(Settings {
            settle_ms: Some(0),
            ..Settings::default()
        });
    };
    let path = home.join("remotes.toml");
    let file: File = match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).map_err(|e| {
            // toml quotes the offending line, which could hold a secret: keep the position only.
            let at = e
                .span()
                .map(|s| format!(" at byte {}", s.start))
                .unwrap_or_default();
            Error::InvalidArgument(
                path.display().to_string(),
                format!(
                    "not a valid remotes file{at} (sections [s3.BUCKET] or [s3.default] with endpoint, region, access_key_id, secret_access_key, session_token, single_writer, settle_ms)"
                ),
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => File::default(),
        Err(e) => return Err(Error::host(path.display(), e)),
    };
    let mut s = file
        .s3
        .get(bucket)
        .or_else(|| file.s3.get("default"))
        .cloned()
        .unwrap_or_default();
    let pick = |slot: &mut Option<String>, names: &[&str]| {
        if let Some(v) = names.iter().find_map(|n| env(n)) {
            *slot = Some(v);
        }
    };
    pick(
        &mut s.endpoint,
        &["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"],
    );
    pick(&mut s.region, &["AWS_REGION", "AWS_DEFAULT_REGION"]);
    pick(&mut s.access_key_id, &["AWS_ACCESS_KEY_ID"]);
    pick(&mut s.secret_access_key, &["AWS_SECRET_ACCESS_KEY"]);
    pick(&mut s.session_token, &["AWS_SESSION_TOKEN"]);
    s.retries = env("AVFS_REMOTE_RETRIES")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    if let Some(ms) = env("AVFS_REMOTE_SETTLE_MS").and_then(|v| v.parse().ok()) {
        s.settle_ms = Some(ms);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("s3://my-bucket/team/proj/").unwrap(),
            Location::S3 {
                bucket: "my-bucket".into(),
                prefix: "team/proj".into()
            }
        );
        assert_eq!(
            parse_url("s3://my-bucket").unwrap(),
            Location::S3 {
                bucket: "my-bucket".into(),
                prefix: "".into()
            }
        );
        assert_eq!(
            parse_url("file:///srv/avfs").unwrap(),
            Location::Local {
                dir: "/srv/avfs".into()
            }
        );
        for bad in [
            "s3://KEY:SECRET@bucket/x",
            "s3://AB",
            "file://relative",
            "file:///a/../b",
            "http://x",
            "s3://bucket//x",
            "s3://bucket/x?y",
        ] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(!e.contains("KEY:SECRET"), "{e}");
        }
    }
}
