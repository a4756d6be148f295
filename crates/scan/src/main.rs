//! `npu-scan`: parse the arguments, run, exit with the code the run chose.

use clap::Parser;

// Parsing allocates many small AST nodes; mimalloc spends less time on them than the system
// allocator (measured with `cargo xtask bench scan`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    no_huge_pages();
    let cli = scan::cli::Cli::parse();
    let stdout = std::io::stdout();
    // stderr is locked per write, not for the run: worker threads write to it too (a panic
    // message of a rule, the progress bar), and would wait forever on a lock held here.
    let code = scan::cli::run(&cli, &mut stdout.lock(), &mut std::io::stderr());
    std::process::exit(code);
}

/// Turn transparent huge pages off for this process. mimalloc asks for them, and the kernel
/// then zeroes 2 MiB at the first touch of each: on a large tree that cost about a tenth of
/// the scan's wall time and a quarter of its memory (`cargo xtask bench scan`).
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // A kernel without the flag (before 3.15) keeps huge pages: only slower.
        let _ = nix::sys::prctl::set_thp_disable(true);
    }
}
