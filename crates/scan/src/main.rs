//! `npu-scan`: parse the arguments, run, exit with the code the run chose.

use clap::Parser;

fn main() {
    let cli = scan::cli::Cli::parse();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let code = scan::cli::run(&cli, &mut stdout.lock(), &mut stderr.lock());
    std::process::exit(code);
}
