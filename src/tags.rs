//! Tags and metadata of files: extended attributes `user.avfs.tag.<TAG>` (empty value)
//! and `user.avfs.meta.<KEY>` (the value). Being attributes, they are stored in the tree
//! entries, so checkpoints, forks, copies and merges keep them, and a mount shows them
//! (`getfattr -d`, `setfattr`).

use std::collections::BTreeMap;

use crate::error::{Error, Result};

pub const TAG_PREFIX: &[u8] = b"user.avfs.tag.";
pub const META_PREFIX: &[u8] = b"user.avfs.meta.";

fn check(what: &str, name: &str, forbid_eq: bool) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > 200
        || name.chars().any(|c| c.is_control())
        || (forbid_eq && name.contains('='));
    if bad {
        return Err(Error::InvalidArgument(
            name.into(),
            format!(
                "{what} names are 1-200 bytes without control characters{}",
                if forbid_eq { " or '='" } else { "" }
            ),
        ));
    }
    Ok(())
}

/// The attribute name of tag `tag`.
pub fn tag_attr(tag: &str) -> Result<Vec<u8>> {
    check("tag", tag, false)?;
    Ok([TAG_PREFIX, tag.as_bytes()].concat())
}

/// The attribute name of metadata key `key`.
pub fn meta_attr(key: &str) -> Result<Vec<u8>> {
    check("metadata key", key, true)?;
    Ok([META_PREFIX, key.as_bytes()].concat())
}

/// The tags among `xattrs`, sorted.
pub fn tags_of(xattrs: &[(Vec<u8>, Vec<u8>)]) -> Vec<String> {
    xattrs
        .iter()
        .filter_map(|(n, _)| n.strip_prefix(TAG_PREFIX))
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .collect()
}

/// The metadata among `xattrs` (values shown as UTF-8, invalid bytes as U+FFFD).
pub fn meta_of(xattrs: &[(Vec<u8>, Vec<u8>)]) -> BTreeMap<String, String> {
    xattrs
        .iter()
        .filter_map(|(n, v)| {
            n.strip_prefix(META_PREFIX).map(|k| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
        })
        .collect()
}

/// A `--meta` filter: `KEY` (has the key) or `KEY=VALUE` (has it with this value).
pub fn parse_filter(s: &str) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    match s.split_once('=') {
        Some((k, v)) => Ok((meta_attr(k)?, Some(v.as_bytes().to_vec()))),
        None => Ok((meta_attr(s)?, None)),
    }
}
