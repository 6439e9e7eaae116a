//! `rollout-plugin-check`: checks a plugin endpoint against the plugin API's
//! rules; see the crate's library and docs/plugin-api.md §6.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rollout_plugin_check::{TlsFiles, Verdict, check};

/// Checks that the rollout plugin at HOST:PORT follows the rules the
/// controller and the gateway rely on, and prints one line per rule: `PASS
/// NAME`, `SKIP NAME: reason` (the rule does not apply to the plugin, such as
/// identity to a plugin that does not mutate) or `FAIL NAME: reason`. Exits 0
/// when no rule fails (SKIP does not fail), 1 when one fails, 2 on bad flags
/// or an endpoint it cannot reach.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Flags {
    /// Speak TLS, trusting this CA bundle (PEM) for the plugin's certificate.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Present this client certificate (PEM), for a plugin requiring mutual
    /// TLS.
    #[arg(long, value_name = "FILE", requires_all = ["key_file", "ca_file"])]
    cert_file: Option<PathBuf>,
    /// The private key of --cert-file (PEM).
    #[arg(long, value_name = "FILE", requires = "cert_file")]
    key_file: Option<PathBuf>,
    /// The plugin's gRPC endpoint.
    #[arg(value_name = "HOST:PORT")]
    target: String,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let tls = TlsFiles {
        ca_file: flags.ca_file,
        cert_file: flags.cert_file,
        key_file: flags.key_file,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("rollout-plugin-check: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(check(&flags.target, &tls)) {
        Ok(outcomes) => {
            // A reason may quote the plugin's own text (its messages): one
            // line each, whatever bytes it holds.
            for outcome in &outcomes {
                println!("{}", rollout_wire::escaped(&outcome.to_string()));
            }
            if !outcomes
                .iter()
                .any(|o| matches!(o.verdict, Verdict::Fail(_)))
            {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!(
                "rollout-plugin-check: {}",
                rollout_wire::escaped(&e.to_string())
            );
            ExitCode::from(2)
        }
    }
}
