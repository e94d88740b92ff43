use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use configsum::config::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // One crypto provider for the whole process: ring, as kube uses.
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        eprintln!("configsum: a TLS crypto provider was already installed");
        return ExitCode::FAILURE;
    }
    let cli = Cli::parse();
    let Command::Serve(args) = cli.command;
    init_logging(args.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("configsum: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(configsum::server::serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "configsum serve could not start");
            eprintln!("configsum: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter =
        EnvFilter::try_from_env("CONFIGSUM_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Json => {
            builder.json().flatten_event(true).with_current_span(true).with_span_list(false).init()
        }
        LogFormat::Text => builder.init(),
    }
}
