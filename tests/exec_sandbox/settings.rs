//! The sandbox end to end: settings and errors: a run that cannot be set up, policy settings, avfs home.

use super::*;

/// A run that cannot be set up is an error, never a run without the sandbox, and the
/// command did not run; an approval is not used up by a run that never got to start.
#[test]
fn a_run_that_cannot_be_set_up_is_an_error() {
    if !can_sandbox("a_run_that_cannot_be_set_up_is_an_error") {
        return;
    }
    let env = setup();
    // The workspace path is a file: the run's mount cannot be made.
    let file = env.path("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    env.json(&["vault", "set-path", "--name", "t", file.to_str().unwrap()]);
    // (Without the sandbox: in the sandbox the path, below /tmp, would be in the run's
    // own /tmp, where a directory can be made.)
    let out = env
        .cmd([
            "--json",
            "--vault",
            "t",
            "exec",
            "--no-sandbox",
            "--",
            "touch",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "sandbox_unavailable", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not-a-dir"),
        "{v}"
    );
    assert_eq!(
        env.run(&["--vault", "t", "cat", "/x"]).code,
        1,
        "the command ran"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    assert!(
        std::fs::read_dir(env.home().join("runs")).map_or(true, |mut d| d.next().is_none()),
        "a run directory is left"
    );
}

/// `[sandbox] default = true` makes it the default, `--no-sandbox` turns it off, and
/// `required = true` refuses `--no-sandbox`. Malformed settings are errors.
#[test]
fn policy_settings_make_the_sandbox_the_default() {
    let env = setup();
    // Denied commands need no sandbox: the envelope still has `sandbox`.
    let x = exec(&env, &["--sandbox", "--shell", "sudo cat /etc/passwd"]);
    assert_eq!(x.code, 126);
    assert_eq!(
        x.env["sandbox"],
        json!({"enforced": false, "mechanism": "none", "network": false, "network_granted_by": null,
               "writable_paths": [], "read_only_paths": [], "hidden_paths": []})
    );
    policy(&env, "[sandbox]\nrequired = true\n");
    let err = env.json_err(&["--vault", "t", "exec", "--no-sandbox", "--", "true"], 1);
    assert_eq!(err["kind"], "refused", "{err}");
    assert!(err["message"].as_str().unwrap().contains("required"));
    for bad in [
        "[sandbox]\nread_only_paths = [\"relative/dir\"]\n",
        "[sandbox]\nextra_read_only_paths = [\"/a/../etc\"]\n",
        "[sandbox]\nhidden_paths = [\"$PATH\"]\n",
        "[sandbox]\nnetwork = \"yes\"\n",
        "[sandbox]\nunknown = 1\n",
        "[[rule]]\nname = \"x\"\nprogram = \"x\"\ncategory = \"mutating\"\nnetwork = \"yes\"\n",
    ] {
        policy(&env, bad);
        let err = env.json_err(&["--vault", "t", "exec", "--", "true"], 1);
        assert_eq!(err["kind"], "invalid_argument", "{bad}: {err}");
    }
    policy(
        &env,
        "[sandbox]\ndefault = true\nextra_read_only_paths = [\"/srv\"]\nenv = [\"MY_*\"]\n",
    );
    let show = env.json(&["--vault", "t", "policy", "show"]);
    assert_eq!(show["sandbox"]["default"], true, "{show}");
    assert!(
        show["sandbox"]["read_only_paths"]
            .as_array()
            .unwrap()
            .contains(&json!("/srv"))
    );
    assert_eq!(show["sandbox"]["env"], json!(["MY_*"]));
    if !can_sandbox("policy_settings_make_the_sandbox_the_default") {
        return;
    }
    let x = exec(&env, &["--", "true"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_sandboxed(&x.env, false);
    assert_eq!(x.env["request"]["options"]["sandbox"], false);
    let x = exec(&env, &["--no-sandbox", "--", "true"]);
    assert_eq!(x.env["sandbox"]["enforced"], false);
    assert_eq!(x.env["sandbox"]["network"], true);
    assert_eq!(x.env["request"]["options"]["no_sandbox"], true);
    // The default is the sandbox, even without any policy file; a policy can turn it off.
    std::fs::remove_file(env.home().join("policy.toml")).unwrap();
    assert_sandboxed(&exec(&env, &["--", "true"]).env, false);
    policy(&env, "[sandbox]\ndefault = false\n");
    let x = exec(&env, &["--", "true"]);
    assert_eq!(x.env["sandbox"]["enforced"], false, "{}", x.env);
    policy(&env, "[sandbox]\ndefault = true\n");
    // A vault's own policy file applies to its forks: an ephemeral run is sandboxed too.
    std::fs::remove_file(env.home().join("policy.toml")).unwrap();
    std::fs::create_dir_all(env.home().join("policies")).unwrap();
    std::fs::write(
        env.home().join("policies/t.toml"),
        "[sandbox]\ndefault = true\n",
    )
    .unwrap();
    let x = exec(&env, &["--ephemeral", "--", "sh", "-c", "echo x > f"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_sandboxed(&x.env, false);
}

/// Issue 14, finding 6: a run cannot reach `$AVFS_HOME` or the vault, so it cannot read
/// the vault, rewrite its policy or approve its own pending request, even when told
/// where they are and given the avfs binary.
#[test]
fn a_run_cannot_reach_avfs_home_or_approve_itself() {
    if !can_sandbox("a_run_cannot_reach_avfs_home_or_approve_itself") {
        return;
    }
    let env = setup();
    // A request left pending: a client of a host outside the workspace asks a person
    // (192.0.2.1 is TEST-NET-1, never reached: the request stays pending). A client of
    // 127.0.0.1 would not: in the sandbox that is the workspace's own loopback.
    let asked = env.run(&[
        "--json",
        "--vault",
        "t",
        "exec",
        "--shell",
        "curl -s http://192.0.2.1:9/",
    ]);
    let asked: Value = serde_json::from_str(&asked.stdout).unwrap();
    let id = asked["approval"]["id"].as_str().unwrap().to_string();
    env.allow_all_policy("t");
    let policy_file = env.home().join("policies/t.toml");
    let policy_before = std::fs::read_to_string(&policy_file).unwrap();
    let copy_of_avfs = env.path("avfs-bin");
    std::fs::copy(env!("CARGO_BIN_EXE_avfs"), &copy_of_avfs).unwrap();
    write(
        &env,
        "reach.sh",
        r#"ls "$H/vaults" 2>/dev/null | grep -q . && echo "listed the vaults"
cat "$H/vaults/t.avfs" > stolen.db 2>/dev/null && test -s stolen.db && echo "read the vault"
echo '[defaults]' >> "$H/policies/t.toml" 2>/dev/null && echo "wrote the policy"
AVFS_HOME="$H" "$AVFS" --vault t approve "$ID" >/dev/null 2>&1 && echo "approved itself"
echo done
"#,
    );
    let h = format!("H={}", env.home().display());
    let avfs = format!("AVFS={}", copy_of_avfs.display());
    let ask = format!("ID={id}");
    let x = exec(
        &env,
        &[
            "--sandbox",
            "--env",
            &h,
            "--env",
            &avfs,
            "--env",
            &ask,
            "--",
            "sh",
            "reach.sh",
        ],
    );
    assert_eq!(stdout(&x), "done\n", "{}", x.env);
    assert_eq!(
        std::fs::read_to_string(&policy_file).unwrap(),
        policy_before
    );
    let list = env.json(&["--vault", "t", "approvals"]);
    let entry = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} is gone: {list}"));
    assert_eq!(entry["state"], "pending", "{list}");
}
