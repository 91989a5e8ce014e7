//! Pages of a long list: what every listing (`ls`, `grep`, `find`, `log`, `audit`,
//! `checkpoint list`) returns by default instead of the whole list, so a result stays
//! within what a model can read. A page says how many items there are in all (`total`)
//! and where the next page starts (`next_cursor`, passed back as `--cursor`).

use crate::error::{Error, Result};

/// Items a listing returns when no `--limit` is given (with `--json`, so in MCP too).
pub const DEFAULT_PAGE: usize = 100;

/// Reads a `--cursor`: an opaque token for the caller, a count (or, for `audit`, a row
/// id) for avfs. Anything else is refused with what to pass instead.
pub fn parse_cursor(c: &str) -> Result<usize> {
    c.parse::<usize>().map_err(|_| {
        Error::InvalidArgument(
            c.into(),
            "not a cursor: pass the `next_cursor` of the previous page".into(),
        )
    })
}

/// The limit a listing applies: `--limit` when given, else [`DEFAULT_PAGE`] for JSON
/// (what scripts and models read) and everything for a person's terminal, where a cut
/// list would surprise (`avfs grep x | wc -l`).
pub fn limit_for(limit: Option<usize>, json: bool) -> Option<usize> {
    limit.or(json.then_some(DEFAULT_PAGE))
}

/// Counts the items of a list walked in order and says which belong to the page that
/// skips the first `skip` (the cursor) and keeps at most `limit`.
#[derive(Debug, Clone)]
pub struct Pager {
    skip: usize,
    limit: Option<usize>,
    seen: usize,
}

impl Pager {
    pub fn new(cursor: Option<&str>, limit: Option<usize>) -> Result<Pager> {
        Ok(Pager {
            skip: cursor.map(parse_cursor).transpose()?.unwrap_or(0),
            limit,
            seen: 0,
        })
    }

    /// Counts one more item; true when it is on this page.
    pub fn take(&mut self) -> bool {
        let i = self.seen;
        self.seen += 1;
        i >= self.skip && self.limit.is_none_or(|l| i - self.skip < l)
    }

    /// True once the page is full (later items are only counted).
    pub fn full(&self) -> bool {
        self.limit
            .is_some_and(|l| self.seen >= self.skip.saturating_add(l))
    }

    /// Items counted so far: after the walk, how many there are in all.
    pub fn total(&self) -> usize {
        self.seen
    }

    /// Items on this page.
    pub fn shown(&self) -> usize {
        let end = match self.limit {
            Some(l) => self.seen.min(self.skip.saturating_add(l)),
            None => self.seen,
        };
        end.saturating_sub(self.skip)
    }

    /// The cursor of the next page; None when this page reaches the end.
    pub fn next_cursor(&self) -> Option<String> {
        let end = self.skip.saturating_add(self.limit?);
        (self.seen > end).then(|| end.to_string())
    }
}

/// The page of `items` that ends `cursor` items before the end (pages go back from the
/// newest, as `checkpoint list` does): the range to keep, and the next page's cursor.
pub fn from_end(
    total: usize,
    cursor: Option<&str>,
    limit: Option<usize>,
) -> Result<(std::ops::Range<usize>, Option<String>)> {
    let skip = cursor.map(parse_cursor).transpose()?.unwrap_or(0);
    let end = total.saturating_sub(skip);
    let start = limit.map_or(0, |l| end.saturating_sub(l));
    Ok((start..end, (start > 0).then(|| (total - start).to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn following_the_cursor_visits_every_item_once() {
        let items: Vec<usize> = (0..250).collect();
        let mut got = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut p = Pager::new(cursor.as_deref(), Some(100)).unwrap();
            for i in &items {
                if p.take() {
                    got.push(*i);
                }
            }
            assert_eq!(p.total(), 250);
            assert!(p.shown() <= 100);
            match p.next_cursor() {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(got, items);

        let mut back = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let (r, next) = from_end(250, cursor.as_deref(), Some(100)).unwrap();
            back.splice(0..0, r);
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(back, items);
        assert!(Pager::new(Some("x"), None).is_err());
    }
}
