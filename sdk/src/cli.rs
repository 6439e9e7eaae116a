//! What plugin binaries share (feature `cli`): the TLS flags, logging, and
//! the rest of `main` ([`run_plugin`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::error::ServeError;
use crate::plugin::RolloutPlugin;
use crate::server::{ServeOptions, TlsOptions};

/// `--tls-cert FILE --tls-key FILE [--client-ca FILE]`, to flatten into a
/// plugin's clap flags:
///
/// ```
/// #[derive(clap::Parser)]
/// struct Flags {
///     /// Address to serve gRPC on.
///     #[arg(long, default_value = "127.0.0.1:7000")]
///     listen: std::net::SocketAddr,
///     #[command(flatten)]
///     tls: rollout_plugin_sdk::cli::TlsArgs,
/// }
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
#[command(about = None, long_about = None)]
pub struct TlsArgs {
    /// Serve gRPC over TLS with this certificate chain (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM): mutual TLS.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The TLS options the flags name, read from their files; `None` when no
    /// flag is set. Fails with [`ServeError::ReadTls`] naming a file that
    /// cannot be read, and with [`ServeError::TlsFlags`] when a flag lacks
    /// its partner (clap's `requires` already rules that out on the command
    /// line).
    pub fn load(&self) -> Result<Option<TlsOptions>, ServeError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                TlsOptions::from_files(cert, key, self.client_ca.as_deref()).map(Some)
            }
            (None, None) if self.client_ca.is_some() => Err(ServeError::TlsFlags(
                "--client-ca requires --tls-cert and --tls-key",
            )),
            (None, None) => Ok(None),
            (Some(_), None) => Err(ServeError::TlsFlags("--tls-cert requires --tls-key")),
            (None, Some(_)) => Err(ServeError::TlsFlags("--tls-key requires --tls-cert")),
        }
    }
}

/// How log lines look (`--log-format`): human-readable text, or one JSON
/// object per line carrying the `trace_id` and `span_id` of the call it was
/// logged in (the gateway's and the controller's format too).
pub use rollout_telemetry::logs::LogFormat;

/// What every plugin binary's flags have beyond its own: the TLS flags,
/// `--log-format` and `--health-listen`. Flatten it into the plugin's clap
/// flags and pass it to [`run_plugin_with`].
// Without the `about = None`, clap would take this doc comment as the --help
// text of a plugin that has no doc comment of its own.
#[derive(Debug, Clone, clap::Args)]
#[command(about = None, long_about = None)]
pub struct ServeArgs {
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Log lines as `text`, or as `json`: one object per line, with the
    /// call's trace_id and span_id.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// Also serve gRPC health alone, in plaintext, on this address (for
    /// kubelet gRPC probes, which cannot speak TLS, when --tls-cert is set).
    #[arg(long, value_name = "ADDR")]
    pub health_listen: Option<SocketAddr>,
}

/// Logs to stderr (stdout carries only the listening line), filtered by
/// `RUST_LOG`, `info` when unset or invalid, in colour only on a terminal
/// and only when `NO_COLOR` is unset or empty (<https://no-color.org>).
/// Call once, first thing in `main`; later calls do nothing.
pub fn init_tracing() {
    init_tracing_with(LogFormat::Text);
}

/// [`init_tracing`] in either format.
pub fn init_tracing_with(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The gateway's and the controller's rule, from its one source.
    let colour = rollout_telemetry::logs::stderr_colour();
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_env_filter(filter);
    // An error means a subscriber is already set: keep it.
    let _ = match format {
        LogFormat::Text => builder
            .fmt_fields(rollout_telemetry::logs::TextFields)
            .try_init(),
        LogFormat::Json => builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(rollout_telemetry::logs::JsonLines)
            .try_init(),
    };
}

/// The rest of a plugin binary's `main`, once its flags are parsed: text
/// logs, a runtime, TLS from `tls`, then [`crate::serve`] on `listen` until
/// SIGTERM or Ctrl-C ([`run_plugin_with`] with the other flags unset).
pub fn run_plugin<P: RolloutPlugin>(
    name: &str,
    plugin: P,
    listen: SocketAddr,
    tls: &TlsArgs,
) -> ExitCode {
    let args = ServeArgs {
        tls: tls.clone(),
        log_format: LogFormat::Text,
        health_listen: None,
    };
    run_plugin_with(name, plugin, listen, &args)
}

/// The rest of a plugin binary's `main`, once its flags are parsed: logging
/// ([`init_tracing_with`] `--log-format`), a runtime, TLS from the TLS
/// flags, spans exported as the `OTEL_*` variables say (service name `name`
/// unless `OTEL_SERVICE_NAME`), the `--health-listen` port, then
/// [`crate::serve`] on `listen` until SIGTERM or Ctrl-C. A failure (a file
/// that cannot be read, a taken port) is printed as `NAME: error` and exits
/// 1.
pub fn run_plugin_with<P: RolloutPlugin>(
    name: &str,
    plugin: P,
    listen: SocketAddr,
    args: &ServeArgs,
) -> ExitCode {
    init_tracing_with(args.log_format);
    let served = (|| -> Result<(), Box<dyn std::error::Error>> {
        let mut options = ServeOptions::default();
        if let Some(tls) = args.tls.load()? {
            options = options.tls(tls);
        }
        if let Some(addr) = args.health_listen {
            options = options.health_listen(addr);
        }
        let runtime = tokio::runtime::Runtime::new()?;
        let tracer = rollout_telemetry::Tracer::new(
            crate::service::TRACER_SCOPE,
            &rollout_telemetry::TracingOptions::from_env(name),
        )?;
        options = options.tracer(tracer.clone());
        let result = runtime.block_on(crate::serve(plugin, listen, options));
        // Off the runtime: exports the spans still queued (blocking).
        tracer.shutdown();
        result?;
        Ok(())
    })();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The errors carry their causes in their messages.
            eprintln!("{name}: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        tls: TlsArgs,
    }

    #[test]
    fn flags_come_in_pairs() {
        assert!(Flags::try_parse_from(["p", "--tls-cert", "c"]).is_err());
        assert!(Flags::try_parse_from(["p", "--tls-key", "k"]).is_err());
        assert!(Flags::try_parse_from(["p", "--client-ca", "ca"]).is_err());
        let none = Flags::try_parse_from(["p"]).map(|f| f.tls.load().map(|t| t.is_none()));
        assert!(matches!(none, Ok(Ok(true))));
        let half = TlsArgs {
            tls_cert: Some("c".into()),
            ..TlsArgs::default()
        };
        assert_eq!(
            half.load().map(|_| ()).map_err(|e| e.to_string()),
            Err("invalid TLS flags: --tls-cert requires --tls-key".to_string())
        );
    }

    /// A plugin without a doc comment of its own, as a short `main` is
    /// written.
    #[derive(Debug, Parser)]
    #[command(name = "my-plugin", version, about)]
    struct Undocumented {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[derive(Debug, Parser)]
    #[command(name = "my-plugin", version, about, long_about)]
    struct UndocumentedLong {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[derive(Debug, Parser)]
    #[command(name = "my-plugin")]
    struct Bare {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// A plugin with its own doc comment.
    ///
    /// It does one thing.
    #[derive(Debug, Parser)]
    #[command(name = "my-plugin", version, about, long_about)]
    struct Documented {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// The SDK's flattened flags bring their options, never the SDK's own
    /// text, into a plugin's --help.
    #[test]
    fn a_plugins_help_shows_the_plugins_text_not_the_sdks() {
        use clap::CommandFactory;
        for help in [
            Undocumented::command().render_long_help().to_string(),
            Undocumented::command().render_help().to_string(),
            Documented::command().render_long_help().to_string(),
            Documented::command().render_help().to_string(),
            UndocumentedLong::command().render_long_help().to_string(),
            Bare::command().render_long_help().to_string(),
        ] {
            assert!(!help.contains("every plugin binary"), "{help}");
            assert!(!help.contains("Flatten it"), "{help}");
            assert!(help.contains("--log-format"), "{help}");
        }
        let long = Documented::command().render_long_help().to_string();
        assert!(long.contains("It does one thing."), "{long}");
    }

    #[test]
    fn unreadable_files_are_named() {
        let flags = TlsArgs {
            tls_cert: Some("/nonexistent/tls.crt".into()),
            tls_key: Some("/nonexistent/tls.key".into()),
            client_ca: None,
        };
        let err = flags.load().map(|_| ()).map_err(|e| e.to_string());
        assert!(
            matches!(&err, Err(m) if m.starts_with("cannot read certificate /nonexistent/tls.crt")),
            "{err:?}"
        );
    }
}
