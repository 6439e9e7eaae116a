//! `rollout-controller simulate` put together: the gateway client, the
//! trace export, the metrics, the recorder around the hooks and the report
//! on standard output, around [`super::run`]; then the files the command
//! line asked for.

use std::path::PathBuf;
use std::sync::Arc;

use thiserror::Error;

use super::{Config, JsonLines, Recorder, Report, SimError, Summary, run, terminal::Terminal};
use rollout_controller::hooks::{GatewayError, GatewayHooks, GatewayOptions};
use rollout_controller::metrics::{ControllerMetrics, Metered};
use rollout_controller::telemetry::{DEFAULT_SERVICE_NAME, Tracing, TracingError, TracingOptions};

/// One `rollout-controller simulate`.
#[derive(Debug)]
pub struct SimulateOptions {
    /// The simulation.
    pub config: Config,
    /// The gateway the hooks go to (only called with a plugin).
    pub gateway: GatewayOptions,
    /// One JSON object per line instead of the terminal's text.
    pub json: bool,
    /// Where to write the metrics the run recorded (OpenMetrics text),
    /// whatever the run's end.
    pub metrics_file: Option<PathBuf>,
    /// Where to write the summary (JSON) of a rollout that ran to its end.
    pub summary_file: Option<PathBuf>,
}

/// Why `rollout-controller simulate` failed.
#[derive(Debug, Error)]
pub enum SimulateError {
    /// The trace export could not be set up.
    #[error(transparent)]
    Tracing(#[from] TracingError),
    /// The gateway's address cannot be used: bad input, found before
    /// anything ran.
    #[error("--gateway: {0}")]
    Gateway(#[source] GatewayError),
    /// The rollout did not run to its end; the text says what to do about
    /// it.
    #[error("{}", .error.advice(gateway))]
    Simulation {
        /// Why.
        #[source]
        error: SimError,
        /// The gateway's address, for the advice.
        gateway: String,
    },
    /// A file asked for could not be written.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The summary could not be encoded.
    #[error("encoding the summary")]
    Encode(#[source] serde_json::Error),
}

/// Runs the simulation `options` describe, reporting on standard output
/// (see [`super::run`]), and writes the files asked for. Call it inside a
/// Tokio runtime; trace export is flushed before it returns.
pub async fn simulate(options: SimulateOptions) -> Result<Summary, SimulateError> {
    let telemetry = Tracing::new(&TracingOptions::from_env(DEFAULT_SERVICE_NAME))?;
    let gateway =
        GatewayHooks::new(&options.gateway, telemetry.clone()).map_err(SimulateError::Gateway)?;
    let metrics = Arc::new(ControllerMetrics::new());
    let mut config = options.config;
    config.metrics = Some(metrics.clone());
    let hooks = Recorder::new(Metered::new(gateway, metrics.clone()));
    let mut report: Box<dyn Report> = if options.json {
        Box::new(JsonLines::new(std::io::stdout()))
    } else {
        Box::new(Terminal::new(std::io::stdout()))
    };
    let url = options.gateway.url.as_str();
    let result = run(&config, &hooks, &telemetry, Some(url), report.as_mut()).await;
    let exporter = telemetry.clone();
    let _ = tokio::task::spawn_blocking(move || exporter.shutdown()).await;
    if let Some(path) = &options.metrics_file {
        write(path, metrics.encode())?;
    }
    let summary = result.map_err(|error| SimulateError::Simulation {
        error,
        gateway: url.to_owned(),
    })?;
    if let Some(path) = &options.summary_file {
        let text = serde_json::to_string_pretty(&summary).map_err(SimulateError::Encode)?;
        write(path, text + "\n")?;
    }
    Ok(summary)
}

fn write(path: &PathBuf, contents: String) -> Result<(), SimulateError> {
    std::fs::write(path, contents).map_err(|source| SimulateError::Write {
        path: path.clone(),
        source,
    })
}
