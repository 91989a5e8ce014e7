fn main() {
    std::process::exit(agentvfs::cli::main());
}
