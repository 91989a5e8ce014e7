//! Path filters of a change list (`avfs diff A B -- /src`): a change is kept when its
//! path, or a rename's old path, is one of the given paths or lies below one.

use super::Change;

/// True when `path` is `prefix` or below it (both shown paths like `/src/a.rs`).
pub fn under(path: &str, prefix: &str) -> bool {
    prefix == "/"
        || path == prefix
        || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// The changes that touch one of `prefixes`; all of them when `prefixes` is empty.
pub fn keep_under(changes: Vec<Change>, prefixes: &[String]) -> Vec<Change> {
    if prefixes.is_empty() {
        return changes;
    }
    changes
        .into_iter()
        .filter(|c| {
            prefixes
                .iter()
                .any(|p| under(&c.path, p) || c.from.as_deref().is_some_and(|f| under(f, p)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::under;

    #[test]
    fn prefixes_match_whole_components() {
        assert!(under("/src/a.rs", "/src"));
        assert!(under("/src", "/src"));
        assert!(!under("/srcx/a.rs", "/src"));
        assert!(under("/anything", "/"));
    }
}
