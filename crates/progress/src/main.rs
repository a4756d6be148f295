//! `npu-progress`: parse the arguments, run, map the outcome to an exit status.

// The binary's job is to print the product and the errors.
#![allow(clippy::print_stderr)]

use clap::Parser;
use progress::{Args, Error, run};
use std::error::Error as _;
use std::io::{ErrorKind, Write};
use std::process::ExitCode;

// Loading issues.json allocates one string per field of every issue; mimalloc spends less time
// on them than the system allocator (measured with `cargo xtask bench progress`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = run(&args, &mut out, &mut stderr.lock());
    let flushed = out.flush();
    match (result, flushed) {
        (Err(Error::Output(e)), _) | (Ok(_), Err(e)) if e.kind() == ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        (Ok(exit), Ok(())) => ExitCode::from(exit.code()),
        (Ok(_), Err(e)) => report(&Error::Output(e)),
        (Err(e), _) => report(&e),
    }
}

fn report(error: &Error) -> ExitCode {
    eprintln!("npu-progress: error: {error}");
    let mut cause = error.source();
    while let Some(e) = cause {
        eprintln!("  caused by: {e}");
        cause = e.source();
    }
    ExitCode::from(2)
}
