use std::io::IsTerminal as _;
use std::process::ExitCode;

use configsum::config::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // One crypto provider for the whole process: ring, as kube uses.
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        eprintln!("configsum: a TLS crypto provider was already installed");
        return ExitCode::FAILURE;
    }
    let cli = Cli::parse_args();
    // Declared kinds join the table before anything reads a kind; a bad file is a usage error.
    let custom_kinds = match &cli.command {
        Command::Serve(args) => args.kinds.custom_kinds.as_deref(),
        Command::Controller(args) => args.kinds.custom_kinds.as_deref(),
        Command::Explain(args) => args.kinds.custom_kinds.as_deref(),
        Command::Render(_) | Command::EnsureDigestKey(_) => None,
    };
    if let Err(e) = configsum::process::startup::declare_custom_kinds(custom_kinds) {
        eprintln!("configsum: {e}");
        return ExitCode::from(2);
    }
    let log_format = match cli.command {
        // A filter: no runtime, no log lines, notes on stderr, its own exit codes.
        Command::Render(args) => return ExitCode::from(configsum::render::command::run(args)),
        // A question answered on stdout, with its own exit codes.
        Command::Explain(args) => return ExitCode::from(configsum::explain::run(&args)),
        Command::Serve(ref args) => args.log.log_format,
        Command::EnsureDigestKey(ref args) => args.log.log_format,
        Command::Controller(ref args) => args.log.log_format,
    };
    // Held until exit: dropping it flushes the log lines still queued.
    let _log_guard = match init_logging(log_format) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("configsum: cannot start the log writer: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("configsum: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => {
            runtime.block_on(configsum::webhook::serve(args)).map_err(|e| (e.to_string(), 1))
        }
        Command::EnsureDigestKey(args) => runtime
            .block_on(configsum::digest_key::run(&args))
            .map(|_| ())
            .map_err(|e| (e.to_string(), 1)),
        Command::Controller(args) => runtime
            .block_on(configsum::controller::run(args))
            .map_err(|e| (e.to_string(), e.exit_code())),
        Command::Render(_) | Command::Explain(_) => Ok(()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((e, code)) => {
            tracing::error!(error = %e, "configsum failed");
            eprintln!("configsum: {e}");
            ExitCode::from(code)
        }
    }
}

/// Log lines are written by a background thread in batches, so an admission
/// never waits on a write to stderr and a burst becomes few writes.
fn init_logging(format: LogFormat) -> std::io::Result<configsum::process::log_writer::FlushOnDrop> {
    let filter =
        EnvFilter::try_from_env("CONFIGSUM_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal();
    let (writer, guard) = configsum::process::log_writer::batched(std::io::stderr())?;
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    match format {
        LogFormat::Json => {
            builder.json().flatten_event(true).with_current_span(true).with_span_list(false).init()
        }
        LogFormat::Text => builder.init(),
    }
    Ok(guard)
}
