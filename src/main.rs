fn main() {
    // Die quietly on a closed pipe (`avfs diff | head`), like other Unix tools.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::process::exit(agentvfs::cli::main());
}
