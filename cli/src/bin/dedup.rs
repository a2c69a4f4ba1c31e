fn main() -> std::process::ExitCode {
    dedup_cli::main()
}
