fn main() -> std::process::ExitCode {
    toolcall_dedup::cli::main()
}
