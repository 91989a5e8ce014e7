"""The search, tagging, host-copy and mount methods of :class:`~agentvfs.Workspace`
(a mixin, to keep each module to one job)."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Union

from .tooltypes import CopyResult, FindResult, GrepResult, MountRecord, SearchResult, TagResult

PathLike = Union[str, "os.PathLike[str]"]


class ToolsMixin:
    """Needs ``self._run(*args)`` (``avfs --json --vault=V ARGS``) and ``self.avfs``."""

    vault: str

    def _run(self, *args: str, input: Optional[bytes] = None) -> Dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    def _whole(self, args: Sequence[str], tail: Sequence[str], *keys: str, back: bool = False) -> Dict[str, Any]:
        """Runs a paged listing (``--limit``/``--cursor``, default page 100) and follows
        ``next_cursor`` to the end: the document with every page's ``keys`` joined, in
        order. ``back``: pages go back from the newest (``log``, ``audit``, ``checkpoint
        list``), so older pages come first."""
        doc = dict(self._run(*args, *tail))
        while doc.get("next_cursor") is not None:
            page = self._run(*args, f"--cursor={doc['next_cursor']}", *tail)
            for k in keys:
                doc[k] = (page[k] + doc[k]) if back else (doc[k] + page[k])
            doc["next_cursor"] = page.get("next_cursor")
        return doc

    def grep(
        self,
        pattern: str,
        path: str = "/",
        *,
        ignore_case: bool = False,
        fixed: bool = False,
        word: bool = False,
        hidden: bool = False,
        files_only: bool = False,
        at: Optional[str] = None,
    ) -> GrepResult:
        """``grep``: lines matching a regular expression (Rust regex syntax, like
        ripgrep), below ``path``; ``fixed`` for a literal. No match is an empty result,
        not an error."""
        args = ["grep", "-n"]
        for on, flag in (
            (ignore_case, "--ignore-case"),
            (fixed, "--fixed-strings"),
            (word, "--word-regexp"),
            (hidden, "--hidden"),
            (files_only, "--files-with-matches"),
        ):
            if on:
                args.append(flag)
        if at is not None:
            args.append(f"--at={at}")
        doc = self._whole(args, ["--", pattern, path], "matches", "files")
        # A file whose matches span two pages is on both.
        doc["files"] = list(dict.fromkeys(doc["files"]))
        return GrepResult.from_json(doc)

    def find(
        self,
        path: str = "/",
        *,
        name: Union[str, Sequence[str], None] = None,
        type: Union[str, Sequence[str], None] = None,
        size: Union[str, Sequence[str], None] = None,
        newer: Optional[str] = None,
        tag: Union[str, Sequence[str], None] = None,
        meta: Union[str, Sequence[str], None] = None,
        max_depth: Optional[int] = None,
        at: Optional[str] = None,
    ) -> FindResult:
        """``find``: entries below ``path`` by name glob (``"*.py"``), type (``f``,
        ``d``, ``l``...), size (``"+10k"``), change since a checkpoint (``newer``), tags
        and metadata (``"KEY"`` or ``"KEY=VALUE"``). A list means any of the names or
        types, all of the sizes, tags and metadata."""
        args = ["find"]
        for opt, values in (("name", name), ("type", type), ("size", size), ("tag", tag), ("meta", meta)):
            for v in [values] if isinstance(values, str) else list(values or []):
                args.append(f"--{opt}={v}")
        if newer is not None:
            args.append(f"--newer={newer}")
        if max_depth is not None:
            args.append(f"--max-depth={int(max_depth)}")
        if at is not None:
            args.append(f"--at={at}")
        return FindResult.from_json(self._whole(args, ["--", path], "entries"))

    def search(
        self, query: str, *, path: Optional[str] = None, limit: Optional[int] = None, fts: bool = False
    ) -> SearchResult:
        """``search``: ranked full-text search over the text files (every word
        required; ``fts=True`` for raw SQLite FTS5 syntax)."""
        args = ["search"]
        if path is not None:
            args.append(f"--path={path}")
        if limit is not None:
            args.append(f"--limit={int(limit)}")
        if fts:
            args.append("--fts")
        return SearchResult.from_json(self._run(*args, "--", query))

    def tag(self, path: str, *tags: str) -> TagResult:
        """``tag PATH TAG...``: adds tags (``user.avfs.*`` attributes, kept by
        checkpoints and forks). ``changed`` lists the ones that were not there yet."""
        if not tags:
            raise ValueError("tag: give at least one tag")
        return TagResult.from_json(self._run("tag", "--", path, *tags))

    def untag(self, path: str, *tags: str) -> TagResult:
        """``untag PATH TAG...``: removes tags; ``changed`` lists the ones removed."""
        if not tags:
            raise ValueError("untag: give at least one tag")
        return TagResult.from_json(self._run("untag", "--", path, *tags))

    def import_dir(self, host_dir: PathLike, to: str = "/") -> CopyResult:
        """``import HOST_DIR VAULT_DIR``: copies a host directory into the workspace."""
        return CopyResult.from_json(self._run("import", "--", os.fspath(host_dir), to))

    def export_dir(self, path: str, host_dir: PathLike, *, force: bool = False) -> CopyResult:
        """``export VAULT_DIR HOST_DIR``: copies a workspace directory out to the host
        (``force`` to write into a non-empty host directory)."""
        args = ["export"] + (["--force"] if force else [])
        return CopyResult.from_json(self._run(*args, "--", path, os.fspath(host_dir)))

    def mount(self, mountpoint: PathLike, *, readonly: bool = False) -> MountRecord:
        """``mount MOUNTPOINT``: serves the workspace there (FUSE) until :meth:`unmount`;
        returns once the mount is ready."""
        args = ["mount"] + (["--readonly"] if readonly else [])
        return MountRecord.from_json(self._run(*args, "--", os.fspath(mountpoint))["mount"])

    def unmount(self, mountpoint: PathLike) -> str:
        """``unmount MOUNTPOINT``; returns the result (``"unmounted"``, or ``"cleaned up
        a stale mount"``)."""
        return str(self._run("unmount", "--", os.fspath(mountpoint)).get("result", ""))

    def mounts(self) -> List[MountRecord]:
        """``mounts``: every live mount of this ``$AVFS_HOME`` (any vault)."""
        return [MountRecord.from_json(m) for m in self._run("mounts").get("mounts", [])]
