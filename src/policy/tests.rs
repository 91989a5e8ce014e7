//! The policy's unit tests: decisions per category, nesting, git, user rules.
use super::*;

fn decide(line: &str) -> Decision {
    Policy::builtin().decide_shell(line, &[], None)
}

#[test]
fn defaults_per_category() {
    assert_eq!(decide("ls -la").action, Action::Allow);
    assert_eq!(decide("git status").action, Action::Allow);
    assert_eq!(decide("echo x > f").action, Action::AllowWithCheckpoint);
    assert_eq!(decide("rm -rf build").action, Action::AllowWithCheckpoint);
    assert!(
        decide("rm -rf build")
            .categories
            .contains(&Category::Destructive)
    );
    assert_eq!(
        decide("curl https://example.com").action,
        Action::RequireApproval
    );
    assert_eq!(decide("cat /etc/passwd").action, Action::Deny);
    assert_eq!(decide("cat ~/.ssh/id_rsa").action, Action::Deny);
    assert_eq!(decide("ls ../../..").action, Action::Deny);
    assert_eq!(decide("cd / && ls").action, Action::Deny);
    assert_eq!(decide("frobnicate --all").action, Action::RequireApproval);
    assert_eq!(decide("echo 'unterminated").action, Action::RequireApproval);
}

#[test]
fn strictest_wins_through_nesting() {
    let d = decide("cd .. && curl x");
    assert_eq!(d.action, Action::Deny, "{d:?}");
    assert!(d.categories.contains(&Category::Networked));
    let d = decide("bash -c \"rm -rf .\"");
    assert!(d.categories.contains(&Category::Destructive));
    assert_eq!(decide("ls $(curl x)").action, Action::RequireApproval);
    assert_eq!(decide("env FOO=1 sudo ls").action, Action::Deny);
    assert!(
        decide("find . -name '*.o' -delete")
            .categories
            .contains(&Category::Destructive)
    );
    assert!(
        decide("find . -exec rm -rf {} ;")
            .categories
            .contains(&Category::Destructive)
    );
    assert_eq!(decide("git -C /etc status").action, Action::Deny);
    assert_eq!(decide("git -C sub push").action, Action::RequireApproval);
    assert_eq!(decide("xargs curl < urls").action, Action::RequireApproval);
    assert_eq!(decide("ls > /dev/null 2>&1").action, Action::Allow);
}

#[test]
fn git_global_options_do_not_hide_the_subcommand() {
    let d = decide("git -C sub status");
    assert_eq!(d.action, Action::Allow, "{d:?}");
    assert_eq!(d.categories, [Category::ReadOnly]);
    assert_eq!(
        decide("git --no-pager -c color.ui=never log").action,
        Action::Allow
    );
    assert_eq!(
        decide("git -C sub --git-dir=.git push").action,
        Action::RequireApproval
    );
    assert_eq!(decide("git --git-dir=/etc/x log").action, Action::Deny);
    assert_eq!(decide("git --work-tree ../.. status").action, Action::Deny);
    assert_eq!(
        decide("git -C sub commit -m x").action,
        Action::AllowWithCheckpoint
    );
    assert_eq!(decide("git --version").action, Action::Allow);
}

#[test]
fn user_rules_override_and_test_examples() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p.toml");
    std::fs::write(
        &f,
        r#"
[defaults]
networked = "deny"

[[rule]]
name = "npm-install-ok"
program = "npm"
args = ["install", "**"]
decision = "allow_with_checkpoint"
category = "networked"
examples = ["npm install left-pad"]
counter_examples = ["npm publish"]
"#,
    )
    .unwrap();
    let p = Policy::load(&[&f]).unwrap();
    assert_eq!(
        p.decide_shell("npm install x", &[], None).action,
        Action::AllowWithCheckpoint
    );
    assert_eq!(p.decide_shell("curl x", &[], None).action, Action::Deny);
    assert!(p.test_examples().iter().all(|e| e.ok));
    std::fs::write(&f, "[[rule]]\nname = 1\n").unwrap();
    assert!(Policy::load(&[&f]).is_err());
    std::fs::write(&f, "[defaults]\nnetworked = \"maybe\"\n").unwrap();
    assert!(Policy::load(&[&f]).is_err());
}

#[test]
fn sandbox_settings_and_network_grants() {
    let dir = tempfile::tempdir().unwrap();
    let (user, vault) = (dir.path().join("u.toml"), dir.path().join("v.toml"));
    std::fs::write(
        &user,
        "[sandbox]\nrequired = true\nnetwork = true\nenv = [\"A\"]\n\n\
         [[rule]]\nname = \"registry\"\nprogram = \"npm\"\nargs = [\"ci\"]\n\
         category = \"networked\"\ndecision = \"allow\"\nnetwork = true\n",
    )
    .unwrap();
    std::fs::write(
        &vault,
        "[sandbox]\ndefault = true\nrequired = false\nnetwork = false\n\
         read_only_paths = [\"/usr\"]\nextra_read_only_paths = [\"~/tools\"]\nenv = [\"B\"]\n",
    )
    .unwrap();
    let p = Policy::load(&[&user, &vault]).unwrap();
    assert!(p.sandbox.default);
    assert!(p.sandbox.required, "the vault's file cannot unset required");
    assert!(!p.sandbox.network, "the vault's file overrides network");
    assert_eq!(p.sandbox.read_only_paths, ["/usr", "~/tools"]);
    assert_eq!(p.sandbox.env, ["A", "B"]);
    let d = p.decide_shell("npm ci && ls", &[], None);
    assert_eq!(d.action, Action::Allow);
    assert_eq!(d.network_rule(), Some("registry"));
    assert!(
        !serde_json::to_string(&d).unwrap().contains("\"network\""),
        "the grant is not part of the decision's JSON"
    );
    assert_eq!(p.decide_shell("npm test", &[], None).network_rule(), None);
    assert_eq!(
        Policy::builtin()
            .decide_shell("curl x", &[], None)
            .network_rule(),
        None
    );
}
