//! The workspace's own loopback, as a sandboxed run's policy trusts it: a run without the
//! network granted has a network namespace with only loopback, shared with the
//! workspace's services (`avfs service`), never the host's. A server listening there, or
//! a client that names only loopback addresses, reaches nothing outside the workspace, so
//! it runs unattended (with a checkpoint) and the network is not granted.

use super::decision::{Action, Category, Finding};

/// Clients whose URL arguments are judged.
const CLIENTS: &[&str] = &[
    "curl", "wget", "http", "https", "xh", "nc", "ncat", "telnet",
];

/// Servers that only listen (the policy's `network-tool` servers).
const SERVERS: &[&str] = &["http.server", "SimpleHTTPServer"];

/// Options of the clients above whose value is not a host (the next argument).
const VALUE_OPTIONS: &[&str] = &[
    "-o",
    "--output",
    "-w",
    "--write-out",
    "-X",
    "--request",
    "-H",
    "--header",
    "-d",
    "--data",
    "--data-raw",
    "--data-binary",
    "-m",
    "--max-time",
    "--connect-timeout",
    "-O",
    "--output-document",
    "-T",
    "--upload-file",
    "-A",
    "--user-agent",
    "-e",
    "--referer",
    "--retry",
    "-t",
    "--tries",
    "-T",
    "--timeout",
    "-w",
    "--wait",
    "-F",
    "--form",
];

fn loopback_host(h: &str) -> bool {
    let h = h.trim_start_matches('[');
    let host = match h.strip_prefix("::1]") {
        Some(_) => return true,
        None => h.split([':', '/']).next().unwrap_or(""),
    };
    host == "localhost"
        || host.ends_with(".localhost")
        || host.strip_prefix("127.").is_some_and(|r| {
            r.split('.').all(|o| o.parse::<u8>().is_ok()) && r.split('.').count() == 3
        })
}

/// Does `argv` (a client's) name only loopback addresses, at least one?
fn only_loopback(argv: &[String]) -> bool {
    let mut named = 0;
    let mut skip = false;
    for a in argv.iter().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        if a.starts_with('-') {
            skip = VALUE_OPTIONS.contains(&a.as_str());
            continue;
        }
        let host = match a.split_once("://") {
            Some(("http" | "https" | "ws" | "wss", rest)) => rest,
            Some(_) => return false,
            None if a.chars().all(|c| c.is_ascii_digit()) => continue,
            None => a.as_str(),
        };
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        if !loopback_host(host) {
            return false;
        }
        named += 1;
    }
    named > 0
}

/// A sandboxed run's finding about `argv`: a loopback-only client or a listening server
/// is contained.
pub fn contain(f: &mut Finding, argv: &[String]) {
    if f.category != Category::Networked || f.explicit || f.rule != "network-tool" {
        return;
    }
    let name = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let prog = name(&f.program);
    let server = SERVERS
        .iter()
        .any(|s| prog == *s || argv.iter().any(|a| a == s));
    let client = CLIENTS.contains(&name(argv.first().map_or("", |s| s.as_str())).as_str())
        && only_loopback(argv);
    if !(server || client) {
        return;
    }
    f.action = f.action.min(Action::AllowWithCheckpoint);
    f.network = false;
    f.reason = format!(
        "{} (the workspace's own loopback in the sandbox, shared with its services; not the host's)",
        f.reason
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn loopback_clients() {
        assert!(only_loopback(&v(
            "curl -s -o /dev/null -w %{http_code} http://127.0.0.1:8000/"
        )));
        assert!(only_loopback(&v("curl localhost:3000/api")));
        assert!(only_loopback(&v("curl http://[::1]:80/")));
        assert!(!only_loopback(&v(
            "curl http://127.0.0.1/ https://example.com/"
        )));
        assert!(!only_loopback(&v("curl example.com")));
        assert!(!only_loopback(&v("curl file:///etc/passwd")));
        assert!(!only_loopback(&v("curl -s")));
        assert!(!only_loopback(&v("curl http://127.0.0.1.evil.com/")));
    }
}
