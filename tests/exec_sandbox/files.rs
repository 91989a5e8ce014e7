//! The sandbox end to end: the file system: writes, reads and metadata outside the workspace, host secrets.

use super::*;

/// The workspace, a private /tmp and /dev/shm are the only writable places; the host
/// outside them is read-only or absent, and the envelope and audit log say so.
#[test]
fn writing_outside_the_workspace_fails() {
    if !can_sandbox("writing_outside_the_workspace_fails") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let host_dir = env.path("host");
    std::fs::create_dir_all(&host_dir).unwrap();
    let host_file = host_dir.join("escape.txt");
    let tmp_marker = format!("/tmp/avfs-sandbox-{}", std::process::id());
    let etc_marker = format!("/etc/avfs-sandbox-{}", std::process::id());
    // Each attempt prints ok or FAILED; the targets come from the environment, so the
    // policy does not see them.
    write(
        &env,
        "escape.sh",
        r#"try() { if sh -c "$2" 2>/dev/null; then echo "$1 ok"; else echo "$1 FAILED"; fi; }
try workspace 'echo in > inside.txt'
try host-dir 'echo out > "$HOST_FILE"'
try etc 'echo out > "$ETC_FILE"'
try usr 'touch /usr/avfs-sandbox-escape'
try home 'touch "$HOME/avfs-sandbox-escape"'
try root 'touch /avfs-sandbox-escape'
try tmp 'echo t > "$TMP_FILE" && test -s "$TMP_FILE"'
try shm 'echo s > /dev/shm/x'
try mkdir-root 'mkdir /newdir'
try remount 'mount -o remount,rw /usr'
try mknod 'mknod disk b 254 0'
try sysctl 'v=$(cat /proc/sys/kernel/core_pattern) && echo "$v" > /proc/sys/kernel/core_pattern'
"#,
    );
    let vars = [
        format!("HOST_FILE={}", host_file.display()),
        format!("ETC_FILE={etc_marker}"),
        format!("TMP_FILE={tmp_marker}"),
    ];
    let mut args: Vec<&str> = vec!["--sandbox"];
    for v in &vars {
        args.extend(["--env", v]);
    }
    args.extend(["--", "sh", "escape.sh"]);
    let x = exec(&env, &args);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(
        stdout(&x),
        "workspace ok\nhost-dir FAILED\netc FAILED\nusr FAILED\nhome FAILED\nroot FAILED\n\
         tmp ok\nshm ok\nmkdir-root FAILED\nremount FAILED\nmknod FAILED\nsysctl FAILED\n",
        "{}",
        x.env
    );
    assert!(
        !host_file.exists(),
        "the sandbox wrote {}",
        host_file.display()
    );
    assert!(!Path::new(&etc_marker).exists());
    assert!(
        !Path::new(&tmp_marker).exists(),
        "the sandbox's /tmp is the host's"
    );
    assert!(!Path::new("/usr/avfs-sandbox-escape").exists());
    // What changed in the workspace is reported as usual.
    let changed: Vec<&str> = x.env["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["/inside.txt"], "{}", x.env);
    assert_eq!(env.cat(Some("t"), "inside.txt"), "in\n");
    assert_sandboxed(&x.env, false);
    let sb = &x.env["sandbox"];
    assert!(sb["network_granted_by"].is_null());
    let ro: Vec<&str> = sb["read_only_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(ro.contains(&"/usr"), "{ro:?}");
    assert!(
        !ro.iter()
            .any(|p| Path::new(&std::env::var("HOME").unwrap_or("/root".into())).starts_with(p)),
        "the home directory (or a directory above it) is visible: {ro:?}"
    );
    assert_eq!(x.env["request"]["options"]["sandbox"], true);
    // No capability that could undo the sandbox: CAP_SYS_ADMIN (mount), CAP_MKNOD,
    // CAP_DAC_READ_SEARCH (open_by_handle_at), CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_NET_ADMIN.
    let x = exec(
        &env,
        &["--sandbox", "--", "grep", "CapEff", "/proc/self/status"],
    );
    let caps = stdout(&x)
        .lines()
        .find_map(|l| l.split("CapEff:").nth(1))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap_or_else(|| panic!("no CapEff: {}", x.env));
    for (name, bit) in [
        ("CAP_DAC_READ_SEARCH", 2),
        ("CAP_NET_ADMIN", 12),
        ("CAP_SYS_MODULE", 16),
        ("CAP_SYS_PTRACE", 19),
        ("CAP_SYS_ADMIN", 21),
        ("CAP_MKNOD", 27),
    ] {
        assert_eq!(caps & (1 << bit), 0, "{name} in the sandbox: {caps:x}");
    }
    // Root may still manage ownership inside the workspace (tar, package managers).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let x = exec(
            &env,
            &[
                "--sandbox",
                "--shell",
                "touch owned && chown 1234:1234 owned",
            ],
        );
        assert_eq!(x.code, 0, "{}", x.env);
    }
    // The audit log records the same sandbox.
    let id = x.env["id"].as_str().unwrap();
    assert_eq!(audit_run(&env, id)["sandbox"], x.env["sandbox"]);
    // Without the sandbox the same script does write the host file: the test is real.
    let mut args: Vec<&str> = vec!["--no-sandbox"];
    for v in &vars[..1] {
        args.extend(["--env", v]);
    }
    args.extend(["--", "sh", "-c", "echo out > \"$HOST_FILE\""]);
    let x = exec(&env, &args);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "out\n");
    let sb = &x.env["sandbox"];
    assert_eq!(sb["enforced"], false);
    assert_eq!(sb["writable_paths"], json!(["/"]));
}

/// `~/.ssh` (and other secrets) cannot be read: the home directory is absent by
/// default, and secrets stay hidden when a policy shows the home directory read-only.
#[test]
fn reading_home_secrets_fails() {
    if !can_sandbox("reading_home_secrets_fails") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let home = env.path("userhome");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "SECRET-KEY\n").unwrap();
    std::fs::write(home.join(".aws/credentials"), "SECRET-AWS\n").unwrap();
    std::fs::write(home.join(".netrc"), "SECRET-NETRC\n").unwrap();
    std::fs::write(home.join("notes.txt"), "plain notes\n").unwrap();
    let home_s = home.to_str().unwrap();
    let vars = [("HOME", home_s)];
    write(
        &env,
        "peek.sh",
        r#"for f in .ssh/id_ed25519 .aws/credentials .netrc notes.txt; do
  if c=$(cat "$HOME/$f" 2>/dev/null); then echo "$f: $c"; else echo "$f: unreadable"; fi
done
ls -A "$HOME/.ssh" 2>/dev/null | wc -l
"#,
    );
    // Without the sandbox every file is readable (so the test can tell).
    let x = exec_with(&env, &vars, &["--no-sandbox", "--", "sh", "peek.sh"]);
    assert_eq!(
        stdout(&x),
        ".ssh/id_ed25519: SECRET-KEY\n.aws/credentials: SECRET-AWS\n.netrc: SECRET-NETRC\n\
         notes.txt: plain notes\n1\n"
    );
    // Default sandbox: the home directory is not there at all.
    let x = exec_with(&env, &vars, &["--sandbox", "--", "sh", "peek.sh"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(
        stdout(&x),
        ".ssh/id_ed25519: unreadable\n.aws/credentials: unreadable\n.netrc: unreadable\n\
         notes.txt: unreadable\n0\n",
        "{}",
        x.env
    );
    // A policy that shows the whole home directory still hides the secrets.
    policy(&env, "[sandbox]\nextra_read_only_paths = [\"~\"]\n");
    let x = exec_with(&env, &vars, &["--sandbox", "--", "sh", "peek.sh"]);
    assert_eq!(
        stdout(&x),
        ".ssh/id_ed25519: unreadable\n.aws/credentials: unreadable\n.netrc: unreadable\n\
         notes.txt: plain notes\n0\n",
        "{}",
        x.env
    );
    let hidden = x.env["sandbox"]["hidden_paths"].as_array().unwrap().clone();
    for s in [".ssh", ".aws", ".netrc"] {
        let p = home.join(s).display().to_string();
        assert!(hidden.contains(&json!(p)), "{p} not in {hidden:?}");
    }
    // Nor can it write there.
    let x = exec_with(
        &env,
        &vars,
        &["--sandbox", "--", "sh", "-c", "echo x >> notes.txt"],
    );
    assert_eq!(x.code, 0, "writes inside the workspace: {}", x.env);
    write(&env, "w.sh", "echo x >> \"$HOME/notes.txt\"\n");
    let x = exec_with(&env, &vars, &["--sandbox", "--", "sh", "w.sh"]);
    assert_ne!(x.code, 0, "{}", x.env);
    assert_eq!(
        std::fs::read_to_string(home.join("notes.txt")).unwrap(),
        "plain notes\n"
    );
}
