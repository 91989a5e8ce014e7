//! `avfs mcp`: the Model Context Protocol over stdio, served with the official Rust SDK
//! (`rmcp`).
//!
//! Every tool call runs this same binary's command line with `--json` in a child process
//! and hands its one JSON document back as the tool's structured result. That is the point,
//! not a shortcut: a call goes through exactly the code, the policy, the audit log and the
//! JSON contract (docs/json.md) that `avfs` itself has, and a command that dies, hangs or is
//! cancelled by the client takes its own process down, never the server. `exec` keeps its
//! watchdog, its subreaper and its signal handling in a process of its own. The cost is one
//! process start per call, a few milliseconds, small beside what the calls do.
//!
//! Audit records and checkpoints made through the server carry the origin `mcp`
//! (`AVFS_ORIGIN`), so a supervisor can tell the agent's calls from a person's.
//!
//! There is deliberately no `approve` tool: an agent must not be able to approve its own
//! request. It lists approvals, and runs an approved one with `exec` and `approve`.

mod args;
mod badargs;
mod output;
mod params;
mod resources;
mod session;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde_json::Value;

use crate::context::AUDIT_ORIGIN_ENV;
use crate::error::{Error, Result};
use args::{Line, decode_content};
use params::*;
use session::SessionMount;

/// Runs the MCP server on stdin/stdout until the client closes the connection (or a
/// SIGTERM, SIGINT or SIGHUP). `vault` is the vault (or fork) tools use when a call names
/// none. With `mount`, that workspace stays mounted while the session lasts, so every
/// `exec` reuses one mount and the kernel's caches (a rebuild finds its files warm)
/// instead of mounting for each command.
pub fn serve(home: &Path, vault: Option<String>, mount: bool) -> Result<i32> {
    check_vault(home, vault.as_deref())?;
    let exe = std::env::current_exe().map_err(|e| Error::host("current executable", e))?;
    // The tools are built before the session's mount: a host's SIGTERM that comes once
    // the mount is there should find the signal handlers as soon as possible.
    let mut tool_router = AvfsServer::tool_router();
    output::trim_input_schemas(&mut tool_router);
    let session_mount = if mount {
        SessionMount::start(&exe, home, vault.as_deref())
    } else {
        None
    };
    let server = AvfsServer {
        exe,
        vault,
        tool_router,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::host("tokio runtime", e))?;
    let served = rt.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let sig = |kind| signal(kind).map_err(|e| Error::host("signal handler", e));
        let (mut term, mut int, mut hup) = (
            sig(SignalKind::terminate())?,
            sig(SignalKind::interrupt())?,
            sig(SignalKind::hangup())?,
        );
        let session = async {
            let service =
                server
                    .serve(rmcp::transport::stdio())
                    .await
                    .map_err(|e| Error::Host {
                        what: "MCP handshake".into(),
                        message: e.to_string(),
                    })?;
            service.waiting().await.map_err(|e| Error::Host {
                what: "MCP server".into(),
                message: e.to_string(),
            })?;
            Ok::<(), Error>(())
        };
        // A signal ends the session at any point, the handshake included.
        tokio::select! {
            r = session => r?,
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        Ok(crate::error::EXIT_OK)
    });
    // A read of stdin cannot be cancelled: do not wait for it.
    rt.shutdown_background();
    // After the runtime stopped: no call runs in the mount any more.
    drop(session_mount);
    served
}

/// Refuses to serve a vault that does not exist: every call would fail (or, for a path,
/// create an empty vault file the user did not ask for). Better said once, at the start.
fn check_vault(home: &Path, vault: Option<&str>) -> Result<()> {
    let Some(sel) = vault else { return Ok(()) };
    let reg = crate::registry::Registry::open(home)?;
    if let Some(v) = reg.resolve(Some(sel))?
        && !v.path.exists()
    {
        return Err(Error::NotFound(format!(
            "{}: no vault file there; create it first (`avfs vault create NAME --path {}`) \
             or give the name of an existing vault (`avfs vault list`)",
            v.path.display(),
            v.path.display()
        )));
    }
    Ok(())
}

#[derive(Clone)]
struct AvfsServer {
    exe: PathBuf,
    vault: Option<String>,
    tool_router: ToolRouter<Self>,
}

impl AvfsServer {
    /// Runs `avfs --json [--vault V] LINE` and turns its JSON document into the result: an
    /// error document (`{"error": …}`) becomes a tool error carrying it, anything else the
    /// structured result. A command's own failure (an exec whose command exited 1) is a
    /// result, not an error: the envelope says what happened.
    async fn call(&self, vault: Option<String>, line: Line) -> Result<CallToolResult, McpError> {
        let doc = self.doc(vault, line).await?;
        if doc.get("error").is_some() {
            Ok(CallToolResult::structured_error(doc))
        } else {
            Ok(CallToolResult::structured(doc))
        }
    }

    /// Runs `avfs --json [--vault V] LINE` and returns the JSON document it printed (an
    /// error document included).
    async fn doc(&self, vault: Option<String>, line: Line) -> Result<Value, McpError> {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("--json");
        if let Some(v) = vault.or_else(|| self.vault.clone()) {
            cmd.arg(format!("--vault={v}"));
        }
        cmd.args(&line.args);
        if !line.positional.is_empty() {
            cmd.arg("--").args(&line.positional);
        }
        cmd.env(AUDIT_ORIGIN_ENV, "mcp")
            .stdin(if line.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A call the client cancels stops its command (exec's watchdog then finishes
            // the bookkeeping: change report, audit record).
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| McpError::internal_error(format!("cannot start avfs: {e}"), None))?;
        if let (Some(data), Some(mut pipe)) = (line.stdin, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            pipe.write_all(&data)
                .await
                .map_err(|e| McpError::internal_error(format!("writing to avfs: {e}"), None))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| McpError::internal_error(format!("waiting for avfs: {e}"), None))?;
        let doc: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            let stderr = String::from_utf8_lossy(&out.stderr);
            McpError::internal_error(
                format!(
                    "avfs printed no JSON document ({e}; {}): {}",
                    out.status,
                    stderr.trim()
                ),
                None,
            )
        })?;
        Ok(doc)
    }

    /// Reads a resource (see `resources`): an error document becomes "resource not
    /// found" with its message, which says what to do.
    async fn read(&self, uri: &str) -> Result<rmcp::model::ReadResourceResult, McpError> {
        let target = resources::parse(uri)?;
        let doc = self.doc(None, resources::line(&target)).await?;
        if let Some(err) = doc.get("error") {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("failed");
            return Err(McpError::resource_not_found(
                format!("{uri}: {message}"),
                Some(doc.clone()),
            ));
        }
        Ok(rmcp::model::ReadResourceResult::new(vec![
            resources::contents(uri, &target, doc),
        ]))
    }
}

#[tool_router]
impl AvfsServer {
    #[tool(
        description = "Run a command in the workspace through the policy (allow, \
        allow_with_checkpoint, deny, require_approval), checkpointed when needed, sandboxed. \
        Returns the envelope: decision, exit code, output head and tail (all: `exec_output`), \
        exactly which files changed.",
        output_schema = output::exec_schema(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn exec(
        &self,
        Parameters(p): Parameters<ExecParams>,
    ) -> Result<CallToolResult, McpError> {
        let approving = p.approve.is_some();
        let mut line = Line::new(&["exec"])
            .opt("cwd", p.cwd)
            .opt("timeout", p.timeout_secs)
            .flag("--checkpoint", p.checkpoint == Some(true))
            .flag("--no-checkpoint", p.checkpoint == Some(false))
            .flag("--rollback-on-failure", p.rollback_on_failure)
            .flag("--sandbox", p.sandbox == Some(true))
            .flag("--no-sandbox", p.sandbox == Some(false))
            .opt("fork", p.fork)
            .flag("--ephemeral", p.ephemeral)
            .opt("approve", p.approve)
            .opt("wait-approval", p.wait_approval_secs)
            .opt("changes", p.changes.map(ChangesParam::name))
            .opt("max-changes", p.max_changes)
            .opt("max-patch-bytes", p.max_patch_bytes)
            .opt("output-head", p.output_head_bytes)
            .opt("output-tail", p.output_tail_bytes);
        for kv in p.env.unwrap_or_default() {
            line = line.opt("env", Some(kv));
        }
        // An approval carries its own command.
        let line = line.command(p.command, p.argv, approving)?;
        let mut r = self.call(p.vault, line).await?;
        if let (Some(doc), Some(false)) = (r.structured_content.as_mut(), r.is_error) {
            output::compact_envelope(doc);
            r = CallToolResult::structured(doc.clone());
        }
        Ok(r)
    }

    #[tool(
        description = "Save a checkpoint of the workspace (O(changes since the last one)).",
        output_schema = output::doc_schema("checkpoint-save"),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn checkpoint_save(
        &self,
        Parameters(p): Parameters<CheckpointSaveParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["checkpoint", "save"])
            .opt("message", p.message)
            .pos(p.name);
        self.call(p.vault, line).await
    }

    #[tool(
        description = "The workspace's newest checkpoints (a page), oldest first, and the head.",
        output_schema = output::doc_schema("checkpoint-list"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn checkpoint_list(
        &self,
        Parameters(p): Parameters<CheckpointListParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["checkpoint", "list"])
            .opt("limit", p.limit)
            .opt("cursor", p.cursor);
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Restore a checkpoint; unsaved changes are kept in an automatic one first.",
        output_schema = output::doc_schema("checkpoint-restore"),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn checkpoint_restore(
        &self,
        Parameters(p): Parameters<CheckpointRestoreParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["checkpoint", "restore"]).pos(Some(p.name));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Changes between two checkpoints, or a checkpoint and the live state; \
        `patch` adds unified diffs.",
        output_schema = output::doc_schema("diff"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn diff(
        &self,
        Parameters(p): Parameters<DiffParams>,
    ) -> Result<CallToolResult, McpError> {
        if p.to.is_some() && p.from.is_none() {
            return Err(badargs::bad_arg(
                "to",
                "`to` needs `from`",
                "give `from` too (the checkpoint to compare from), or leave `to` out to \
                 compare with the live state",
            ));
        }
        // `from` and `to` go before `--`: after it, `diff` takes path filters.
        let mut line = Line::new(&["diff"])
            .flag("--patch", p.patch)
            .flag("--head", p.head && p.from.is_none())
            .opt("offset", p.offset)
            .opt("limit", p.limit)
            .word(p.from)
            .word(p.to);
        for path in p.paths.unwrap_or_default() {
            line = line.opt("path", Some(path));
        }
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Fork the vault into a new workspace in O(1); pass its name as `vault` \
        to work in it.",
        output_schema = output::doc_schema("vault-fork"),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn fork(
        &self,
        Parameters(p): Parameters<ForkParams>,
    ) -> Result<CallToolResult, McpError> {
        let source = match p.vault.or_else(|| self.vault.clone()) {
            Some(v) => v,
            None => self.current_vault().await?,
        };
        let line = Line::new(&["vault", "fork"])
            .opt("from", p.from_checkpoint)
            .pos(Some(source))
            .pos(Some(p.name));
        self.call(None, line).await
    }

    #[tool(
        description = "Commands waiting for a person's approval (`avfs approve ID`); pending \
        only unless `all`.",
        output_schema = output::doc_schema("approvals"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn approvals_list(
        &self,
        Parameters(p): Parameters<ApprovalsParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["approvals"]).flag("--all", p.all);
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Read a file (live or at a checkpoint): utf-8 text, else hex (`encoding`).",
        output_schema = output::doc_schema("cat"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn read_file(
        &self,
        Parameters(p): Parameters<ReadFileParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["cat"]).opt("at", p.at).pos(Some(p.path));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Write (or append to) a file of the workspace.",
        output_schema = output::doc_schema("write"),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<WriteFileParams>,
    ) -> Result<CallToolResult, McpError> {
        let data = decode_content(&p.content, p.encoding.as_deref())?;
        let mut line = Line::new(&["write"])
            .flag("--append", p.append)
            .flag("--parents", p.parents)
            .pos(Some(p.path));
        line.stdin = Some(data);
        self.call(p.vault, line).await
    }

    #[tool(
        description = "List a directory of the workspace: each entry's name, type and size.",
        output_schema = output::doc_schema("ls"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_dir(
        &self,
        Parameters(p): Parameters<ListDirParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["ls", "--brief"])
            .flag("-a", p.all)
            .opt("limit", p.limit)
            .opt("cursor", p.cursor)
            .pos(Some(p.path.unwrap_or_else(|| "/".into())));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Attributes of one path: type, mode, size, times, content hash.",
        output_schema = output::doc_schema("stat"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn stat(
        &self,
        Parameters(p): Parameters<PathParams>,
    ) -> Result<CallToolResult, McpError> {
        self.call(p.vault, Line::new(&["stat"]).pos(Some(p.path)))
            .await
    }

    #[tool(
        description = "The versions of one file across checkpoints and the live state.",
        output_schema = output::doc_schema("log"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn log(&self, Parameters(p): Parameters<LogParams>) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["log"])
            .opt("limit", p.limit)
            .opt("cursor", p.cursor)
            .pos(Some(p.path));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Regex search of file contents, ripgrep-like: matches with path and line \
        (or paths only).",
        output_schema = output::doc_schema("grep"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn grep(
        &self,
        Parameters(p): Parameters<GrepParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["grep", "-n"])
            .flag("--ignore-case", p.ignore_case)
            .flag("--fixed-strings", p.fixed)
            .flag("--word-regexp", p.word)
            .flag("--hidden", p.hidden)
            .flag("--files-with-matches", p.files_only)
            .opt("at", p.at)
            .opt("limit", p.limit)
            .opt("cursor", p.cursor)
            .pos(Some(p.pattern))
            .pos(Some(p.path.unwrap_or_else(|| "/".into())));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Find files by name glob, type, size, tags, metadata, or change since a \
        checkpoint.",
        output_schema = output::doc_schema("find"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn find(
        &self,
        Parameters(p): Parameters<FindParams>,
    ) -> Result<CallToolResult, McpError> {
        let mut line = Line::new(&["find"])
            .opt("newer", p.newer)
            .opt("max-depth", p.max_depth)
            .opt("at", p.at)
            .opt("limit", p.limit)
            .opt("cursor", p.cursor);
        for (opt, values) in [
            ("name", p.name),
            ("type", p.kind),
            ("size", p.size),
            ("tag", p.tag),
            ("meta", p.meta),
        ] {
            for v in values {
                line = line.opt(opt, Some(v));
            }
        }
        let line = line.pos(Some(p.path.unwrap_or_else(|| "/".into())));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Ranked full-text search of text files, with snippets.",
        output_schema = output::doc_schema("search"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn search(
        &self,
        Parameters(p): Parameters<SearchParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["search"])
            .opt("path", p.path)
            .opt("limit", p.limit)
            .flag("--fts", p.fts)
            .pos(Some(p.query));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Add or remove tags (user.avfs.* xattrs, kept by checkpoints and forks) on \
        a path.",
        output_schema = output::doc_schema("tag"),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn tag(&self, Parameters(p): Parameters<TagParams>) -> Result<CallToolResult, McpError> {
        if p.tags.is_empty() {
            return Err(badargs::bad_arg(
                "tags",
                "give at least one tag",
                "pass `tags` as a non-empty list of strings",
            ));
        }
        let mut line = Line::new(&[if p.remove { "untag" } else { "tag" }]).pos(Some(p.path));
        for t in p.tags {
            line = line.pos(Some(t));
        }
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Three-way merge of a fork into its origin (or `into`), line by line, \
        rename-aware. Conflicts change nothing unless `markers`. Makes a checkpoint of the target.",
        output_schema = output::doc_schema("vault-merge"),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn merge(
        &self,
        Parameters(p): Parameters<MergeParams>,
    ) -> Result<CallToolResult, McpError> {
        let mut line = Line::new(&["vault", "merge"])
            .opt("into", p.into)
            .flag("--dry-run", p.dry_run)
            .opt("conflicts", p.markers.then_some("markers"));
        for path in p.paths {
            line = line.opt("path", Some(path));
        }
        self.call(None, line.pos(Some(p.fork))).await
    }

    #[tool(
        description = "Start a server or other long-lived command, decided and sandboxed as \
        `exec`; runs reach it on 127.0.0.1.",
        output_schema = output::doc_schema("service-start"),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn service_start(
        &self,
        Parameters(p): Parameters<ServiceStartParams>,
    ) -> Result<CallToolResult, McpError> {
        let mut line = Line::new(&["service", "start"])
            .opt("name", p.name)
            .opt("cwd", p.cwd)
            .opt("ttl", p.ttl_secs);
        for kv in p.env.unwrap_or_default() {
            line = line.opt("env", Some(kv));
        }
        let line = line.command(p.command, p.argv, false)?;
        self.call(p.vault, line).await
    }

    #[tool(
        description = "The workspace's services: name, state, pid, exit status.",
        output_schema = output::doc_schema("service-list"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn service_list(
        &self,
        Parameters(p): Parameters<VaultOnlyParams>,
    ) -> Result<CallToolResult, McpError> {
        self.call(p.vault, Line::new(&["service", "list"])).await
    }

    #[tool(
        description = "A service's stdout and stderr (`output`).",
        output_schema = output::text_schema(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn service_logs(
        &self,
        Parameters(p): Parameters<ServiceParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["service", "logs"])
            .opt("tail", p.tail)
            .pos(Some(p.service));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "Stop a service (SIGTERM, then SIGKILL).",
        output_schema = output::doc_schema("service-stop"),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn service_stop(
        &self,
        Parameters(p): Parameters<ServiceParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["service", "stop"]).pos(Some(p.service));
        self.call(p.vault, line).await
    }

    #[tool(
        description = "The whole stdout or stderr of an exec, in pages.",
        output_schema = output::doc_schema("output"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn exec_output(
        &self,
        Parameters(p): Parameters<ExecOutputParams>,
    ) -> Result<CallToolResult, McpError> {
        let stream = p.stream.map(|s| match s {
            StreamParam::Stdout => "stdout",
            StreamParam::Stderr => "stderr",
        });
        let line = Line::new(&["output"])
            .opt("stream", stream)
            .opt("offset", p.offset)
            .opt("limit", p.limit)
            .pos(Some(p.exec_id));
        self.call(None, line).await
    }

    #[tool(
        description = "The hash-chained audit log: what changed the vault, who (cli, mcp, \
        exec), when.",
        output_schema = output::doc_schema("audit"),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn audit(
        &self,
        Parameters(p): Parameters<AuditParams>,
    ) -> Result<CallToolResult, McpError> {
        let line = Line::new(&["audit"])
            .opt("limit", p.limit)
            .opt("cursor", p.cursor)
            .opt("since", p.since);
        self.call(p.vault, line).await
    }
}

impl AvfsServer {
    /// The name of the vault calls use when neither the call nor the server names one.
    async fn current_vault(&self) -> Result<String, McpError> {
        let r = self.call(None, Line::new(&["vault", "info"])).await?;
        r.structured_content
            .as_ref()
            .and_then(|v| v.pointer("/vault/name"))
            .and_then(|n| n.as_str())
            .map(str::to_string)
            .ok_or_else(|| McpError::internal_error("no current vault to fork", None))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for AvfsServer {
    /// Every bad argument comes back as a tool error with structured content (see
    /// `badargs`), never as a protocol error or a plain-text one.
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, McpError> {
        if let Some(tool) = self.tool_router.get(&request.name) {
            let args = request.arguments.clone().unwrap_or_default();
            if let Err(e) = badargs::check(&tool.input_schema, &args) {
                return Ok(badargs::tool_error(&e).into());
            }
        }
        let known = self.tool_router.get(&request.name).is_some();
        let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        match self.tool_router.call(tcc).await {
            Ok(rmcp::model::CallToolResponse::Complete(r)) => Ok(badargs::restructure(r).into()),
            // An unknown tool stays a protocol error: there is no argument to fix.
            Err(e) if known && badargs::is_bad_arg(&e) => Ok(badargs::tool_error(&e).into()),
            other => other,
        }
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let find = Line::new(&["find", "--type=f"]).pos(Some("/"));
        let doc = self.doc(None, find).await?;
        Ok(rmcp::model::ListResourcesResult::with_all_items(
            resources::listed(&doc),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        Ok(self.read(&request.uri).await?.into())
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("avfs", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "agentvfs: a versioned, forkable workspace. Run commands with `exec` (the policy \
                 decides; the envelope lists exactly which files changed), take checkpoints \
                 before risky work, restore them to roll back, fork to try things in isolation. \
                 Results are the JSON documents of `avfs --json` (docs/json.md; each tool's \
                 outputSchema lists the fields, schemas/NAME.schema.json has them whole); \
                 exec's envelope leaves out the options left at their default. \
                 Lists come in pages: `limit` (default 100), a page's `next_cursor` as \
                 `cursor` for the next; `total` counts all. Every tool's `vault`: a vault \
                 or fork name, or a .avfs file's path (default: the server's). \
                 A bad argument is a tool error naming the argument and the fix. Resources: \
                 avfs://checkpoints, avfs://files/PATH, avfs://checkpoints/NAME/files/PATH.",
        )
    }
}
