//! `avfs service start --publish PORT`: the one way the host reaches a service. The
//! service listens on 127.0.0.1 of its workspace's network namespace, which the host
//! does not see; its supervisor listens on the host's 127.0.0.1:PORT (loopback only,
//! never another interface) and carries each connection into the service's namespace,
//! to 127.0.0.1:PORT there.
//!
//! The host side is bound before the service is reported running, so a port already
//! taken fails the start. A thread enters the service's network namespace (setns acts
//! on the calling thread only), so its connections are made there while the listener,
//! made before, stays the host's. Everything ends with the supervisor.

use std::io;
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};

/// Binds the host side of each port (127.0.0.1 only).
pub fn bind(ports: &[u16]) -> io::Result<Vec<(u16, TcpListener)>> {
    ports
        .iter()
        .map(|&p| {
            TcpListener::bind((Ipv4Addr::LOCALHOST, p))
                .map(|l| (p, l))
                .map_err(|e| io::Error::new(e.kind(), format!("publishing port {p}: {e}")))
        })
        .collect()
}

/// Serves each bound port: connections to the host's 127.0.0.1:PORT go to 127.0.0.1:PORT
/// in the network namespace of process `pid` (the service's PID 1).
pub fn serve(listeners: Vec<(u16, TcpListener)>, pid: i32) -> io::Result<()> {
    for (port, listener) in listeners {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
        std::thread::spawn(move || {
            if super::sys::setns(&ns, libc::CLONE_NEWNET).is_err() {
                return;
            }
            drop(ns);
            for conn in listener.incoming() {
                let Ok(outside) = conn else { continue };
                // Made by this thread: in the service's namespace.
                let Ok(inside) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
                    continue;
                };
                let _ = splice_both(outside, inside);
            }
        });
    }
    Ok(())
}

/// Copies both ways between two connections, on two threads of their own.
fn splice_both(a: TcpStream, b: TcpStream) -> io::Result<()> {
    let (a2, b2) = (a.try_clone()?, b.try_clone()?);
    std::thread::spawn(move || copy(a, b));
    std::thread::spawn(move || copy(b2, a2));
    Ok(())
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}
