fn main() {
    // Die quietly on a closed pipe (`avfs diff | head`), like other Unix tools.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // PID 1 of an `avfs exec --sandbox` run: not a command of the CLI.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == agentvfs::exec::sandbox::INIT_ARG)
    {
        std::process::exit(agentvfs::exec::sandbox::init_main(&args[2..]));
    }
    std::process::exit(agentvfs::cli::main());
}
