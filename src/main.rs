//! The `meshplan` binary: parse flags, run, print one error line on failure.

use std::io::Write;

use clap::Parser;

/// Whether `e` comes from writing into a closed pipe (`meshplan … | head`),
/// which is not an error worth reporting.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() {
    let cli = meshplan::cli::Cli::parse();
    if let Err(e) = meshplan::cli::run(cli) {
        if is_broken_pipe(&e) {
            std::process::exit(0);
        }
        // Never panic on a closed stderr either.
        let _ = writeln!(std::io::stderr(), "error: {e:#}");
        std::process::exit(1);
    }
}
