"""Typed views of the documents of the search, tagging, host-copy and mount commands
(``grep``, ``find``, ``search``, ``tag``/``untag``, ``import``/``export``, ``mount``/
``mounts``) and of the merge summary. Like :mod:`agentvfs.types`: built with
``from_json``, unknown fields ignored, the source object kept in ``raw``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "GrepMatch",
    "GrepResult",
    "FindEntry",
    "FindResult",
    "SearchIndex",
    "SearchHit",
    "SearchResult",
    "TagResult",
    "CopyStats",
    "CopyResult",
    "MountRecord",
    "MergeSummary",
]

Json = Dict[str, Any]


def _obj(v: Any) -> Json:
    return dict(v) if isinstance(v, Mapping) else {}


def _strs(v: Any) -> List[str]:
    return [str(x) for x in v] if isinstance(v, list) else []


@dataclass(frozen=True)
class GrepMatch:
    """One matching line."""

    path: str
    line: int
    """Line number, from 1."""
    text: str
    """The line without its line ending (invalid UTF-8 as U+FFFD)."""

    @classmethod
    def from_json(cls, d: Any) -> "GrepMatch":
        d = _obj(d)
        return cls(path=str(d.get("path", "")), line=int(d.get("line", 0)), text=str(d.get("text", "")))


@dataclass(frozen=True)
class GrepResult:
    """What ``grep`` printed (``docs/json.md#grep``). No match is not an error:
    ``matches`` and ``files`` are then empty."""

    pattern: str
    path: str
    matches: List[GrepMatch]
    """Matching lines in path order, then line order (empty with ``files_only``)."""
    files: List[str]
    """Files with at least one match, in path order (the client joins every page of
    ``avfs grep --json``)."""
    files_searched: int
    binary_files_skipped: int
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GrepResult":
        return cls(
            pattern=str(d.get("pattern", "")),
            path=str(d.get("path", "")),
            matches=[GrepMatch.from_json(m) for m in d.get("matches") or []],
            files=_strs(d.get("files")),
            files_searched=int(d.get("files_searched", 0)),
            binary_files_skipped=int(d.get("binary_files_skipped", 0)),
            raw=dict(d),
        )


@dataclass(frozen=True)
class FindEntry:
    """One entry ``find`` matched."""

    path: str
    type: str
    size: int
    mode: str
    mtime: str
    tags: List[str]
    meta: Dict[str, str]

    @classmethod
    def from_json(cls, d: Any) -> "FindEntry":
        d = _obj(d)
        return cls(
            path=str(d.get("path", "")),
            type=str(d.get("type", "")),
            size=int(d.get("size", 0)),
            mode=str(d.get("mode", "")),
            mtime=str(d.get("mtime", "")),
            tags=_strs(d.get("tags")),
            meta={str(k): str(v) for k, v in _obj(d.get("meta")).items()},
        )


@dataclass(frozen=True)
class FindResult:
    """What ``find`` printed (``docs/json.md#find``)."""

    path: str
    entries: List[FindEntry]
    """In walk order: depth first, names sorted by bytes."""
    raw: Json = field(repr=False, compare=False)

    @property
    def paths(self) -> List[str]:
        """The paths of :attr:`entries`."""
        return [e.path for e in self.entries]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FindResult":
        return cls(
            path=str(d.get("path", "")),
            entries=[FindEntry.from_json(e) for e in d.get("entries") or []],
            raw=dict(d),
        )


@dataclass(frozen=True)
class SearchIndex:
    """What bringing the full-text index up to date did before a search."""

    root: str
    full: bool
    files_updated: int
    contents_indexed: int
    documents: int

    @classmethod
    def from_json(cls, d: Any) -> "SearchIndex":
        d = _obj(d)
        return cls(
            root=str(d.get("root", "")),
            full=bool(d.get("full", False)),
            files_updated=int(d.get("files_updated", 0)),
            contents_indexed=int(d.get("contents_indexed", 0)),
            documents=int(d.get("documents", 0)),
        )


@dataclass(frozen=True)
class SearchHit:
    """One ranked result of ``search``."""

    path: str
    score: float
    """BM25 relevance, higher is better; comparable only within one search."""
    line: Optional[int]
    snippet: str

    @classmethod
    def from_json(cls, d: Any) -> "SearchHit":
        d = _obj(d)
        return cls(
            path=str(d.get("path", "")),
            score=float(d.get("score", 0.0)),
            line=None if d.get("line") is None else int(d["line"]),
            snippet=str(d.get("snippet", "")),
        )


@dataclass(frozen=True)
class SearchResult:
    """What ``search`` printed (``docs/json.md#search``)."""

    query: str
    fts_query: str
    index: SearchIndex
    results: List[SearchHit]
    """Best first."""
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SearchResult":
        return cls(
            query=str(d.get("query", "")),
            fts_query=str(d.get("fts_query", "")),
            index=SearchIndex.from_json(d.get("index")),
            results=[SearchHit.from_json(r) for r in d.get("results") or []],
            raw=dict(d),
        )


@dataclass(frozen=True)
class TagResult:
    """What ``tag`` or ``untag`` printed."""

    path: str
    changed: List[str]
    """The tags this call added (``tag``) or removed (``untag``); ones already there, or
    already absent, are left out."""
    tags: List[str]
    """All tags of the path afterwards, sorted."""
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TagResult":
        changed = d.get("added") if "added" in d else d.get("removed")
        return cls(path=str(d.get("path", "")), changed=_strs(changed), tags=_strs(d.get("tags")), raw=dict(d))


@dataclass(frozen=True)
class CopyStats:
    """What a copy between the host and the workspace moved (``docs/json.md#host-copy-stats``)."""

    files: int
    dirs: int
    symlinks: int
    hardlinks: int
    bytes: int
    setuid_dropped: int
    skipped: List[Any]
    """Entries not copied, each as ``avfs`` described it."""

    @classmethod
    def from_json(cls, d: Any) -> "CopyStats":
        d = _obj(d)
        return cls(
            files=int(d.get("files", 0)),
            dirs=int(d.get("dirs", 0)),
            symlinks=int(d.get("symlinks", 0)),
            hardlinks=int(d.get("hardlinks", 0)),
            bytes=int(d.get("bytes", 0)),
            setuid_dropped=int(d.get("setuid_dropped", 0)),
            skipped=list(d.get("skipped") or []),
        )


@dataclass(frozen=True)
class CopyResult:
    """What ``import`` (host → workspace) or ``export`` (workspace → host) printed."""

    source: str
    """``from``: the host directory (import) or workspace directory (export)."""
    destination: str
    """``to``: the workspace directory (import) or host directory (export)."""
    stats: CopyStats
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CopyResult":
        return cls(
            source=str(d.get("from", "")),
            destination=str(d.get("to", "")),
            stats=CopyStats.from_json(d.get("stats")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class MountRecord:
    """A live mount (``docs/json.md#mount-record``)."""

    id: str
    vault: str
    vault_path: str
    workspace: str
    mountpoint: str
    pid: int
    socket: str
    readonly: bool
    started_at_ns: int
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Any) -> "MountRecord":
        d = _obj(d)
        return cls(
            id=str(d.get("id", "")),
            vault=str(d.get("vault", "")),
            vault_path=str(d.get("vault_path", "")),
            workspace=str(d.get("workspace", "")),
            mountpoint=str(d.get("mountpoint", "")),
            pid=int(d.get("pid", 0)),
            socket=str(d.get("socket", "")),
            readonly=bool(d.get("readonly", False)),
            started_at_ns=int(d.get("started_at_ns", 0)),
            raw=d,
        )


@dataclass(frozen=True)
class MergeSummary:
    """The counts of a merge (``summary`` of ``vault merge``)."""

    taken: int
    conflicts: int
    unresolved: int
    """Conflicts not resolved by a clean line merge: what a person still has to look at."""

    @classmethod
    def from_json(cls, d: Any) -> "MergeSummary":
        d = _obj(d)
        return cls(
            taken=int(d.get("taken", 0)),
            conflicts=int(d.get("conflicts", 0)),
            unresolved=int(d.get("unresolved", 0)),
        )
