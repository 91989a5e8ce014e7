//! Examples shown at the end of every command's `--help` (and in the man pages). One table,
//! so a test can check that no command is without them.

/// (command path, examples). The path is the subcommand names joined by spaces; "" is `avfs`.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "",
        "  avfs write /notes.txt hello          # creates the default vault on first use
  avfs checkpoint save before-refactor
  avfs vault fork default task-1       # O(1), whatever the size
  avfs --vault task-1 exec -- make test
  avfs vault merge task-1              # bring the task's changes back
  avfs help COMMAND                    # examples for each command",
    ),
    (
        "vault",
        "  avfs vault create work
  avfs vault fork work experiment --use
  avfs vault merge experiment --dry-run",
    ),
    (
        "vault create",
        "  avfs vault create work
  avfs vault create scratch --path /tmp/scratch.avfs
  avfs vault create app --workspace-path /srv/app   # runs see the workspace at /srv/app",
    ),
    (
        "vault set-path",
        "  avfs vault set-path /srv/app                  # the current vault and its forks
  avfs vault set-path --name work ~/src/work",
    ),
    ("vault list", "  avfs vault list\n  avfs --json vault list"),
    (
        "service",
        "  avfs service start --name web -- python3 -m http.server 8000
  avfs exec -- curl -s http://127.0.0.1:8000/   # runs reach it; the host does not
  avfs service logs web --tail 20
  avfs service stop web",
    ),
    (
        "service start",
        "  avfs service start --name web -- python3 -m http.server 8000
  avfs service start --name db --ttl 3600 --env PGPORT=5432 -- ./start-db.sh
  avfs service start --name ui --publish 5173 -- npm run dev   # host: 127.0.0.1:5173
  avfs --json service start -- npm run dev     # id, name, pid and the decision",
    ),
    ("service list", "  avfs service list\n  avfs --json service list"),
    (
        "service logs",
        "  avfs service logs web\n  avfs service logs web --tail 50\n  avfs service logs web --follow",
    ),
    ("service stop", "  avfs service stop web"),
    ("service restart", "  avfs service restart web"),
    ("vault use", "  avfs vault use work"),
    ("vault info", "  avfs vault info\n  avfs vault info task-1"),
    (
        "vault delete",
        "  avfs vault delete task-1 -y        # a fork: its workspace inside the file
  avfs vault delete work -y --force  # a vault with forks: the file and every fork",
    ),
    (
        "vault fork",
        "  avfs vault fork default task-1
  avfs vault fork default try-old --from v1   # from an older checkpoint
  avfs vault fork default task-2 --use        # and make it current",
    ),
    (
        "vault export",
        "  avfs vault export task-1 /backups/task-1.avfs",
    ),
    (
        "vault import",
        "  avfs vault import /backups/task-1.avfs
  avfs vault import ./shared.avfs team",
    ),
    (
        "vault verify",
        "  avfs vault verify\n  avfs vault verify task-1",
    ),
    (
        "vault upgrade",
        "  avfs vault upgrade default   # a vault made before page checksums gets them",
    ),
    (
        "vault recover",
        "  avfs vault recover default /tmp/rescued.avfs   # copy out what is intact
  avfs vault import /tmp/rescued.avfs rescued     # then use it",
    ),
    (
        "vault merge",
        "  avfs vault merge task-1                      # into the vault it was forked from
  avfs vault merge task-1 --dry-run            # what would be taken, what conflicts
  avfs vault merge task-1 --path /src --path /docs
  avfs vault merge task-1 --conflicts=markers  # apply despite conflicts: markers, both binaries
  avfs vault merge task-1 --into task-2        # into a sibling fork",
    ),
    (
        "ls",
        "  avfs ls
  avfs ls -la /src",
    ),
    (
        "cat",
        "  avfs cat /notes.txt
  avfs cat /notes.txt --at before-refactor",
    ),
    (
        "write",
        "  avfs write /notes.txt 'hello'
  echo more | avfs write /notes.txt --append
  avfs write -p /a/b/c.txt 'parents are created'",
    ),
    ("mkdir", "  avfs mkdir /src\n  avfs mkdir -p /src/a/b"),
    ("rm", "  avfs rm /notes.txt\n  avfs rm -rf /build"),
    (
        "mv",
        "  avfs mv /draft.md /docs/final.md\n  avfs mv /old /archive/",
    ),
    (
        "cp",
        "  avfs cp /a.txt /b.txt\n  avfs cp -r /src /src-copy   # O(1) for untouched subtrees",
    ),
    ("tree", "  avfs tree\n  avfs tree -L 2 /src"),
    ("stat", "  avfs stat /notes.txt"),
    (
        "ln",
        "  avfs ln -s ../lib /src/lib-link\n  avfs ln /a.txt /hard-link-to-a",
    ),
    (
        "chmod",
        "  avfs chmod 755 /run.sh\n  avfs chmod u+x,go-w /run.sh",
    ),
    (
        "import",
        "  avfs import ./project\n  avfs import ./assets /static",
    ),
    (
        "export",
        "  avfs export / ./out\n  avfs export /src ./src --force",
    ),
    (
        "checkpoint",
        "  avfs checkpoint save v1 -m 'first working version'
  avfs checkpoint list
  avfs checkpoint restore v1",
    ),
    (
        "checkpoint save",
        "  avfs checkpoint save
  avfs checkpoint save v1 -m 'tests pass'",
    ),
    (
        "checkpoint list",
        "  avfs checkpoint list\n  avfs checkpoint list --graph   # every workspace, forks and merges",
    ),
    (
        "checkpoint prune",
        "  avfs checkpoint prune --keep-last 10 --dry-run
  avfs checkpoint prune --keep-last 10 --keep-days 7
  avfs gc                                  # give the space back",
    ),
    (
        "checkpoint retention",
        "  avfs checkpoint retention --keep-last 10   # after each exec
  avfs checkpoint retention
  avfs checkpoint retention --off",
    ),
    ("checkpoint restore", "  avfs checkpoint restore v1"),
    ("checkpoint delete", "  avfs checkpoint delete v1"),
    (
        "checkpoint diff",
        "  avfs checkpoint diff v1 v2\n  avfs checkpoint diff v1 --patch",
    ),
    (
        "diff",
        "  avfs diff                # the head checkpoint against the live state
  avfs diff v1 v2 --patch
  avfs diff v1 --stat
  avfs diff v1 v2 --name-only -- /src",
    ),
    (
        "log",
        "  avfs log /src/main.rs          # the versions where it changed\n  avfs log /src/main.rs --all",
    ),
    (
        "status",
        "  avfs status\n  avfs --json status",
    ),
    (
        "restore",
        "  avfs restore /src/main.rs --from v1\n  avfs restore /src --from v1",
    ),
    (
        "output",
        "  avfs output ex-1a2b3c4d5e                    # the whole stdout of that exec
  avfs output ex-1a2b3c4d5e --stream stderr | tail -50
  avfs --json output ex-1a2b3c4d5e --offset 16384 --limit 16384",
    ),
    (
        "audit",
        "  avfs audit --limit 20
  avfs audit --since 2h
  avfs audit verify",
    ),
    (
        "audit verify",
        "  avfs audit verify
  avfs audit verify --anchor \"$(cat audit-anchor.txt)\"",
    ),
    (
        "audit anchor",
        "  avfs audit anchor > audit-anchor.txt   # keep it outside the vault",
    ),
    ("gc", "  avfs gc"),
    ("stats", "  avfs stats\n  avfs --json stats"),
    (
        "mount",
        "  avfs mount ~/work
  avfs mount task-1 /mnt/task --readonly
  avfs mount ~/work --foreground",
    ),
    ("unmount", "  avfs unmount ~/work"),
    ("mounts", "  avfs mounts"),
    (
        "exec",
        "  avfs exec -- cargo test
  avfs exec --fork task-7 --shell 'make && ./run-tests.sh'
  avfs exec --ephemeral --rollback-on-failure -- ./migrate.sh
  avfs exec --approve ap-35de9faf94",
    ),
    (
        "policy",
        "  avfs policy show\n  avfs policy check --shell 'curl x | sh'\n  avfs policy test",
    ),
    ("policy show", "  avfs policy show"),
    (
        "policy check",
        "  avfs policy check -- rm -rf /
  avfs policy check --cwd /src --shell 'cd .. && make'",
    ),
    ("policy test", "  avfs policy test"),
    ("approvals", "  avfs approvals\n  avfs approvals --all"),
    (
        "approve",
        "  avfs approve ap-35de9faf94 && avfs exec --approve ap-35de9faf94",
    ),
    ("deny", "  avfs deny ap-35de9faf94"),
    (
        "quota",
        "  avfs quota
  avfs quota set --max-bytes 10G --max-file-size 100M
  avfs quota clear --vault-wide",
    ),
    (
        "quota set",
        "  avfs quota set --max-files 100000\n  avfs quota set --vault-wide --max-bytes 50G",
    ),
    ("quota clear", "  avfs quota clear"),
    (
        "grep",
        "  avfs grep 'fn main'                 # path:text for every matching line
  avfs grep -n -i todo /src           # with line numbers, any case
  avfs grep -l 'unsafe' /src          # only the file names
  avfs grep -F 'a.b(c)' --at v1       # a literal string, in a checkpoint",
    ),
    (
        "find",
        "  avfs find /src --name '*.rs' --type f
  avfs find --size +1M                 # larger than 1 MiB
  avfs find --newer v1                 # added or changed since checkpoint v1
  avfs find --tag reviewed --meta owner=alice",
    ),
    (
        "search",
        "  avfs search connection pool          # files holding both words, best first
  avfs search 'retr*' --path /src
  avfs search --fts 'timeout OR deadline' --limit 5",
    ),
    (
        "tag",
        "  avfs tag /src/auth.rs reviewed security
  avfs find --tag reviewed",
    ),
    ("untag", "  avfs untag /src/auth.rs reviewed"),
    (
        "meta",
        "  avfs meta /report.pdf                 # all tags and metadata
  avfs meta /report.pdf owner alice     # set
  avfs meta /report.pdf owner           # print the value
  avfs meta /report.pdf owner --unset",
    ),
    (
        "shell",
        "  avfs shell                            # $SHELL in the mounted workspace
  avfs --vault task-1 shell --cwd /src",
    ),
    (
        "completions",
        "  avfs completions fish > ~/.config/fish/completions/avfs.fish
  echo 'source <(avfs completions bash)' >> ~/.bashrc   # then: avfs checkpoint restore <TAB>
  echo 'source <(avfs completions zsh)' >> ~/.zshrc     # after compinit",
    ),
    (
        "man",
        "  avfs man | man -l -
  avfs man --dir /usr/local/share/man/man1 && mandb",
    ),
    (
        "mcp",
        "  avfs mcp                              # an MCP client starts this on stdio
  avfs --vault task-1 mcp               # tools work on task-1 unless a call names a vault
  avfs mcp --no-mount                   # keep nothing mounted between exec calls
  avfs audit | grep mcp                 # what the agent did through the server",
    ),
    (
        "remote",
        "  avfs remote add origin s3://team-bucket/projects/web
  avfs remote list",
    ),
    (
        "remote add",
        "  avfs remote add origin s3://team-bucket/projects/web   # endpoint, keys: AWS_* or $AVFS_HOME/remotes.toml
  avfs remote add backup file:///mnt/shared/avfs",
    ),
    ("remote list", "  avfs remote list\n  avfs --json remote list"),
    ("remote remove", "  avfs remote remove backup"),
    (
        "remote gc",
        "  avfs remote gc origin              # packs of killed pushes, older than an hour
  avfs remote gc origin --grace 0",
    ),
    (
        "push",
        "  avfs checkpoint save ready && avfs push      # the head checkpoint, to origin
  avfs push origin v1                          # move origin's ref to checkpoint v1
  avfs push origin --all                       # every workspace (forks too)",
    ),
    (
        "fetch",
        "  avfs fetch
  avfs fetch origin --full                     # a lazy clone fetches every file now",
    ),
    (
        "pull",
        "  avfs pull                                    # fast-forward, or merge with a checkpoint
  avfs pull origin --conflicts=markers",
    ),
    (
        "clone",
        "  avfs clone s3://team-bucket/projects/web      # vault `web`, files fetched on first read
  avfs clone s3://team-bucket/projects/web web-v1 --checkpoint v1
  avfs clone file:///mnt/shared/avfs copy --full",
    ),
];

fn lookup(path: &str) -> Option<&'static str> {
    EXAMPLES.iter().find(|(p, _)| *p == path).map(|(_, t)| *t)
}

/// Adds the examples of `cmd` (at `path`) and of all its subcommands.
pub fn add(mut cmd: clap::Command, path: &str) -> clap::Command {
    if let Some(text) = lookup(path) {
        cmd = cmd.after_help(format!("Examples:\n{text}"));
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for n in names {
        let sub = if path.is_empty() {
            n.clone()
        } else {
            format!("{path} {n}")
        };
        cmd = cmd.mut_subcommand(&n, |s| add(s, &sub));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        out.push(path.to_string());
        // Hidden commands (internal, like `exec-watchdog`) are nobody's to type.
        for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let p = if path.is_empty() {
                s.get_name().to_string()
            } else {
                format!("{path} {}", s.get_name())
            };
            every(s, &p, out);
        }
    }

    #[test]
    fn every_command_has_examples_and_every_example_a_command() {
        let cmd = super::super::cli_command();
        cmd.clone().debug_assert();
        let mut paths = Vec::new();
        every(&cmd, "", &mut paths);
        for p in &paths {
            assert!(lookup(p).is_some(), "`avfs {p}` has no examples");
        }
        for (p, text) in EXAMPLES {
            assert!(
                paths.iter().any(|q| q == p),
                "examples for unknown command `{p}`"
            );
            for line in text.lines() {
                assert!(
                    line.trim_start().starts_with("avfs ")
                        || line.trim_start().starts_with("echo "),
                    "{p}: {line}"
                );
            }
        }
    }
}
