//! The `meshplan` binary: parse flags, run, print one error line on failure.

use clap::Parser;

fn main() {
    let cli = meshplan::cli::Cli::parse();
    if let Err(e) = meshplan::cli::run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
