//! The conflicts of a merge and the line merges of files both sides edited: what the
//! walk (`super::Walker`) records for a path it cannot simply take from the fork.

use super::*;

impl Walker<'_> {
    /// The three-way line merge of a file both sides edited (`b` the base, `None` for
    /// none), or `None` when a side is not text (binary, not UTF-8, over `TEXT_LIMIT`).
    pub(super) fn line_merge(
        &self,
        b: Option<&Entry>,
        f: &Entry,
        t: &Entry,
    ) -> Result<Option<crate::textmerge::TextMerge>> {
        let (Some(base), Some(theirs), Some(ours)) =
            (self.text(b)?, self.text(Some(f))?, self.text(Some(t))?)
        else {
            return Ok(None);
        };
        Ok(Some(crate::textmerge::merge3(
            &base,
            &ours,
            &theirs,
            self.opts.target_label,
            self.opts.fork_label,
        )))
    }

    /// A line merge without overlaps: the file gets it, and the fork's edit is taken.
    pub(super) fn clean_merge(
        &mut self,
        comps: &[Vec<u8>],
        m: crate::textmerge::TextMerge,
        taken: Option<Change>,
    ) {
        self.plan.actions.push(Action::Write {
            comps: comps.to_vec(),
            data: m.text.into_bytes(),
        });
        self.plan.taken.extend(taken);
        self.plan.line_merged.push(display(comps));
    }

    /// Where the fork's version of a binary conflict goes: `NAME.FORK` beside it (with a
    /// number when the target has that name already).
    pub(super) fn beside(&self, comps: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        let label: String = self
            .opts
            .fork_label
            .chars()
            .map(|c| if c == '/' { '_' } else { c })
            .collect();
        let mut out = comps.to_vec();
        let name = comps.last().cloned().unwrap_or_default();
        for n in 0.. {
            let mut v = name.clone();
            v.push(b'.');
            v.extend_from_slice(label.as_bytes());
            if n > 0 {
                v.extend_from_slice(format!(".{n}").as_bytes());
            }
            *out.last_mut().unwrap() = v;
            if entry_at(self.db, &self.target_root, &out)?.is_none() {
                break;
            }
        }
        Ok(out)
    }

    pub(super) fn text(&self, e: Option<&Entry>) -> Result<Option<String>> {
        let Some(e) = e else {
            return Ok(Some(String::new()));
        };
        if e.kind != Kind::File || e.size > TEXT_LIMIT {
            return Ok(None);
        }
        let data = crate::store::content::read_all(self.db, e.hash.as_ref().unwrap(), e.size)?;
        if data.contains(&0) {
            return Ok(None);
        }
        Ok(String::from_utf8(data).ok())
    }

    pub(super) fn conflict(
        &mut self,
        comps: &[Vec<u8>],
        b: Option<&Entry>,
        f: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<()> {
        self.conflict_with(comps, b, f, t, None)
    }

    /// A conflict at `comps`; `merged` is the line merge already made of its content.
    pub(super) fn conflict_with(
        &mut self,
        comps: &[Vec<u8>],
        b: Option<&Entry>,
        f: Option<&Entry>,
        t: Option<&Entry>,
        merged: Option<crate::textmerge::TextMerge>,
    ) -> Result<()> {
        let kind = match (b, f, t) {
            (None, _, _) => ConflictKind::BothAdded,
            (Some(_), None, _) => ConflictKind::DeletedInFork,
            (Some(_), _, None) => ConflictKind::DeletedInTarget,
            (Some(b), Some(f), Some(t)) if b.kind != f.kind || b.kind != t.kind => {
                ConflictKind::TypeChanged
            }
            _ => ConflictKind::BothModified,
        };
        let kind = match (kind, f, t) {
            (ConflictKind::BothAdded, Some(f), Some(t)) if f.kind != t.kind => {
                ConflictKind::TypeChanged
            }
            (k, _, _) => k,
        };
        let mut resolution = Resolution::KeptTarget;
        let mut kept_as = None;
        if self.opts.markers
            && let (Some(fe), Some(te)) = (f, t)
            && fe.kind == Kind::File
            && te.kind == Kind::File
            && (fe.hash, fe.size) != (te.hash, te.size)
        {
            let merged = match merged {
                Some(m) => Some(m),
                None => self.line_merge(b.filter(|b| b.kind == Kind::File), fe, te)?,
            };
            match merged {
                Some(m) => {
                    // Without overlaps, the conflict is in the mode or an attribute: the
                    // content still gets both sides' edits.
                    if m.conflicts > 0 {
                        resolution = Resolution::Markers;
                    }
                    self.plan.actions.push(Action::Write {
                        comps: comps.to_vec(),
                        data: m.text.into_bytes(),
                    });
                }
                None => {
                    // No lines to merge: the fork's version is written beside the target's.
                    let at = self.beside(comps)?;
                    let mut copy = fe.clone();
                    copy.name = at.last().cloned().unwrap_or_default();
                    self.plan.actions.push(Action::Take {
                        comps: at.clone(),
                        entry: Some(copy),
                    });
                    resolution = Resolution::BothKept;
                    kept_as = Some(display(&at));
                }
            }
        }
        self.plan.conflicts.push(Conflict {
            path: display(comps),
            kind,
            fork: side_change(b, f),
            target: side_change(b, t),
            type_base: b.map(|e| e.kind.name()),
            type_fork: f.map(|e| e.kind.name()),
            type_target: t.map(|e| e.kind.name()),
            resolution,
            kept_as,
            comps: comps.to_vec(),
        });
        Ok(())
    }
}
