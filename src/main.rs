//! The `meshplan` binary: parse flags, run, print one error line on failure.

use std::io::Write;

/// Whether `e` comes from writing into a closed pipe (`meshplan … | head`),
/// which is not an error worth reporting.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(BrokenPipe))
            || c.downcast_ref::<csv::Error>()
                .is_some_and(|x| match x.kind() {
                    csv::ErrorKind::Io(io) => io.kind() == BrokenPipe,
                    _ => false,
                })
    })
}

fn main() {
    let cli = meshplan::cli::parse_args();
    if let Err(e) = meshplan::cli::run(cli) {
        if is_broken_pipe(&e) {
            std::process::exit(0);
        }
        // Never panic on a closed stderr either.
        let _ = writeln!(std::io::stderr(), "error: {e:#}");
        std::process::exit(1);
    }
}
