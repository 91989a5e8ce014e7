fn main() {
    // Die quietly on a closed pipe (`avfs diff | head`), like other Unix tools.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // The set-up of an `avfs exec` run (namespaces, mounts, sandbox, PID 1): not a
    // command of the CLI.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == agentvfs::sandbox::RUN_INIT_ARG)
    {
        agentvfs::sandbox::setup::run_init_main();
    }
    // The keeper of a workspace's kept overlay (`engine::kept`).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == agentvfs::sandbox::keeper::KEEP_ARG)
    {
        agentvfs::sandbox::keeper::keep_main();
    }
    // The supervisor of a service (`avfs service start`).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == agentvfs::sandbox::service::SERVICE_ARG)
    {
        agentvfs::sandbox::service::supervise_main();
    }
    std::process::exit(agentvfs::cli::main());
}
