//! README's first command is `cargo run --release`, usually after the test build. When a
//! dev-dependency turns on a feature of a crate the binary also uses, cargo builds that
//! crate twice, once per feature set, and the binary's build compiles the whole crate
//! again (over 20 minutes on a busy 2-core machine: the README example then timed out in
//! CI). Cargo.toml names those features under [dependencies]; this test fails, naming
//! the crates, as soon as a new dependency brings the two feature sets apart again.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Every package of the graph with the features cargo resolves for it, from `cargo tree`
/// over the given edge kinds.
fn features(edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            edges,
            "--prefix",
            "none",
            "-f",
            "{p}|{f}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((pkg, feats)) = line.split_once('|') else {
            continue;
        };
        // "name vX.Y.Z (path)" -> "name vX.Y.Z"; "(*)" marks a repeat.
        let pkg: String = pkg.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        let feats = feats.trim_end_matches(" (*)");
        map.entry(pkg)
            .or_default()
            .extend(feats.split(',').filter(|f| !f.is_empty()).map(String::from));
    }
    map
}

#[test]
fn the_binary_builds_with_the_features_the_test_build_resolves() {
    let binary = features("normal,build");
    let tests = features("normal,build,dev");
    assert!(binary.len() > 50, "cargo tree lists the graph: {binary:?}");
    let apart: Vec<String> = binary
        .iter()
        .filter_map(|(pkg, feats)| {
            let with_dev = &tests[pkg];
            (feats != with_dev).then(|| {
                let extra: Vec<&String> = with_dev.difference(feats).collect();
                format!("{pkg}: the test build adds {extra:?}")
            })
        })
        .collect();
    assert!(
        apart.is_empty(),
        "`cargo run --release` would recompile the crate after `cargo test --release`; \
         name these features under [dependencies] in Cargo.toml:\n{}",
        apart.join("\n")
    );
}
