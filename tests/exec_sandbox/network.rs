//! The sandbox end to end: the network: loopback with and without approval, host listeners.

use super::*;

/// A server on the host's loopback that answers every connection with "pong".
fn pong_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(b"pong\n");
        }
    });
    port
}

const NET_SCRIPT: &str = r#"import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    print("connected:", s.recv(16).decode().strip())
except OSError as e:
    print("no connection:", type(e).__name__)
"#;

fn connected(x: &Exec) -> bool {
    let out = stdout(x);
    assert!(
        out.starts_with("connected: pong") || out.starts_with("no connection"),
        "unexpected output: {}\n{}",
        x.env,
        x.run.stderr
    );
    out.starts_with("connected: pong")
}

/// No network in the sandbox, unless the command was an approved networked one, a rule
/// grants it, or the policy gives it to every sandboxed command.
#[test]
fn loopback_is_unreachable_without_network_and_reachable_when_approved() {
    if !can_sandbox("loopback_is_unreachable_without_network_and_reachable_when_approved") {
        return;
    }
    let env = setup();
    let port = pong_server().to_string();
    write(&env, "net.py", NET_SCRIPT);
    // python3 is "mutating" by default: it runs without approval.
    let x = exec(&env, &["--no-sandbox", "--", "python3", "net.py", &port]);
    assert!(connected(&x), "without the sandbox the server is reachable");
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert!(!connected(&x), "the sandbox reached the host's loopback");
    assert_sandboxed(&x.env, false);
    // The script as a networked command: it needs approval, and once approved it runs
    // in the sandbox with the network.
    policy(
        &env,
        "[[rule]]\nname = \"net-script\"\nprogram = \"python3\"\nargs = [\"net.py\", \"**\"]\ncategory = \"networked\"\n",
    );
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert_eq!(x.code, 75, "{}", x.env);
    assert!(x.env["result"].is_null());
    assert_eq!(x.env["sandbox"]["enforced"], false, "nothing ran");
    assert_eq!(x.env["request"]["options"]["sandbox"], true);
    let id = x.env["approval"]["id"].as_str().unwrap().to_string();
    env.ok(&["--vault", "t", "approve", &id]);
    let x = exec(&env, &["--approve", &id]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert!(
        connected(&x),
        "the approved networked command had no network"
    );
    assert_sandboxed(&x.env, true);
    assert_eq!(
        x.env["sandbox"]["network_granted_by"],
        format!("approval {id}")
    );
    // Approved, but not networked (an unknown program a rule asks for): no network.
    policy(
        &env,
        "[[rule]]\nname = \"net-script\"\nprogram = \"python3\"\nargs = [\"net.py\", \"**\"]\ncategory = \"unknown\"\ndecision = \"require_approval\"\n",
    );
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert_eq!(x.code, 75, "{}", x.env);
    let id = x.env["approval"]["id"].as_str().unwrap().to_string();
    env.ok(&["--vault", "t", "approve", &id]);
    let x = exec(&env, &["--approve", &id]);
    assert!(
        !connected(&x),
        "an approved command that is not networked got the network"
    );
    // A rule grants the network without approval.
    policy(
        &env,
        "[[rule]]\nname = \"local-service\"\nprogram = \"python3\"\nargs = [\"net.py\", \"**\"]\ncategory = \"networked\"\ndecision = \"allow\"\nnetwork = true\n",
    );
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert!(connected(&x), "the rule's network grant was ignored");
    assert_eq!(x.env["sandbox"]["network_granted_by"], "rule local-service");
    // The same rule without the grant: allowed, but no network.
    policy(
        &env,
        "[[rule]]\nname = \"local-service\"\nprogram = \"python3\"\nargs = [\"net.py\", \"**\"]\ncategory = \"networked\"\ndecision = \"allow\"\n",
    );
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert_eq!(x.env["decision"]["action"], "allow");
    assert!(
        !connected(&x),
        "allowed is not the same as granted the network"
    );
    // The policy grants it to every sandboxed command.
    policy(&env, "[sandbox]\nnetwork = true\n");
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert!(connected(&x));
    assert_eq!(x.env["sandbox"]["network_granted_by"], "policy");
}

/// In the sandbox, 127.0.0.1 is the workspace's own network namespace (shared with its
/// services), not the host's: a loopback-only client runs unattended there and reaches
/// nothing of the host, a listener on the host's loopback included. Without the sandbox
/// the same line is the host's loopback, and asks a person.
#[test]
fn a_loopback_client_runs_unattended_in_the_sandbox_and_reaches_nothing_of_the_host() {
    if !can_sandbox(
        "a_loopback_client_runs_unattended_in_the_sandbox_and_reaches_nothing_of_the_host",
    ) {
        return;
    }
    let env = setup();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://127.0.0.1:{}/x", addr.port());
    let curl = ["curl", "-s", "--max-time", "5", url.as_str()];
    let mut args = vec!["--"];
    args.extend(curl);
    let x = exec(&env, &args);
    assert_eq!(
        x.env["decision"]["action"], "allow_with_checkpoint",
        "{}",
        x.env
    );
    assert!(!x.env["result"].is_null(), "{}", x.env);
    assert_sandboxed(&x.env, false);
    // curl could not connect (7): nothing listens on the workspace's loopback.
    assert_eq!(x.code, 7, "{}", x.env);
    assert!(
        listener.accept().is_err(),
        "a default run reached the host's loopback listener"
    );
    // --no-sandbox: the host's loopback; the policy asks, nothing runs.
    let mut args = vec!["--no-sandbox", "--"];
    args.extend(curl);
    let x = exec(&env, &args);
    assert_eq!(x.env["decision"]["action"], "require_approval", "{}", x.env);
    assert!(x.env["result"].is_null(), "{}", x.env);
    assert!(listener.accept().is_err(), "an unapproved run connected");
    // The listener does see a connection when there is one (the test can fail).
    drop(std::net::TcpStream::connect(addr).unwrap());
    let until = Instant::now() + Duration::from_secs(10);
    while listener.accept().is_err() {
        assert!(Instant::now() < until, "the listener never saw the driver");
        std::thread::sleep(Duration::from_millis(10));
    }
}
