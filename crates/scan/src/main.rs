//! `npu-scan`: parse the arguments, run, exit with the code the run chose.

use clap::Parser;

// Parsing allocates many small AST nodes; mimalloc spends less time on them than the system
// allocator (measured with `cargo xtask bench scan`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = scan::cli::Cli::parse();
    let stdout = std::io::stdout();
    // stderr is locked per write, not for the run: worker threads write to it too (a panic
    // message of a rule, the progress bar), and would wait forever on a lock held here.
    let code = scan::cli::run(&cli, &mut stdout.lock(), &mut std::io::stderr());
    std::process::exit(code);
}
