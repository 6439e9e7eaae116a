//! `rollout-controller`: the command line of the slim ManifestWorkReplicaSet
//! controller. It parses flags and calls the library; nothing else.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use jiff::Timestamp;
use rollout_controller::health::{self, Readiness};
use rollout_controller::hooks::{DEFAULT_GATEWAY_URL, GatewayHooks, GatewayOptions, GatewayTls};
use rollout_controller::reconcile::{self, Options};
use rollout_controller::rollout::duration::parse_go_duration;
use rollout_controller::telemetry::{Telemetry, TracingOptions};
use rollout_controller::{api, plan, registration};

/// Exit status for input the command cannot use (bad file, JSON or strategy).
const EXIT_BAD_INPUT: u8 = 2;

#[derive(Debug, Parser)]
#[command(name = "rollout-controller", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// `simulate` joins here, one variant and one function.
#[derive(Debug, Subcommand)]
enum Command {
    /// Reconcile ManifestWorkReplicaSets in a cluster, calling the rollout
    /// gateway at each phase.
    Run(Box<RunArgs>),
    /// One decision of the rollout engine, as JSON in and out.
    Plan(PlanArgs),
    /// Print the CRDs the controller uses, as multi-document YAML.
    Crd(CrdArgs),
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// The input document; `-` reads standard input.
    #[arg(long, value_name = "FILE")]
    input: String,
    /// Indent the output.
    #[arg(long)]
    pretty: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The rollout gateway's gRPC address.
    #[arg(long, value_name = "URL", default_value = DEFAULT_GATEWAY_URL, env = "ROLLOUT_CONTROLLER_GATEWAY")]
    gateway: String,
    /// A kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The deadline of each hook call (a Go duration, at most 30s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    hook_timeout: std::time::Duration,
    /// The hub's name, sent in InitializeRequest.hub_name.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "",
        env = "ROLLOUT_CONTROLLER_HUB_NAME"
    )]
    hub_name: String,
    /// Also keep the gateway's registry ConfigMap `work-controller-config` in
    /// NS up to date with the ClusterManager's workConfiguration.plugins.
    #[arg(long, value_name = "NS")]
    register_plugins_namespace: Option<String>,
    /// Log format on stderr; json lines carry trace_id and span_id inside a reconcile.
    #[arg(long, value_enum, default_value = "text")]
    log_format: rollout_telemetry::logs::LogFormat,
    /// Serve /healthz and /readyz for the kubelet on this address.
    #[arg(long, value_name = "ADDR")]
    health_listen: Option<std::net::SocketAddr>,
    /// The CA bundle (PEM) that signed a TLS gateway's certificate (an
    /// `https://` --gateway).
    #[arg(long, value_name = "FILE")]
    gateway_ca: Option<PathBuf>,
    /// The client certificate (PEM) presented to a central gateway; its
    /// first DNS SAN (else its CN) names this hub. Needs --client-key.
    #[arg(long, value_name = "FILE", requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// The key (PEM) of --client-cert.
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    client_key: Option<PathBuf>,
    /// The name to verify in the gateway's certificate, when not the
    /// --gateway host.
    #[arg(long, value_name = "NAME")]
    gateway_server_name: Option<String>,
}

impl RunArgs {
    /// The TLS settings towards the gateway, reading the files named.
    fn gateway_tls(&self) -> anyhow::Result<Option<GatewayTls>> {
        let read = |path: &PathBuf| {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))
        };
        let https = self.gateway.starts_with("https://");
        if !https && self.gateway_ca.is_none() && self.client_cert.is_none() {
            return Ok(None);
        }
        if !https {
            anyhow::bail!("--gateway-ca and --client-cert need an https:// --gateway");
        }
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            _ => None,
        };
        Ok(Some(GatewayTls {
            ca_pem: self.gateway_ca.as_ref().map(read).transpose()?,
            identity,
            domain: self.gateway_server_name.clone(),
        }))
    }
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let d = parse_go_duration(text).map_err(|e| e.to_string())?;
    std::time::Duration::try_from(d).map_err(|_| format!("{text:?} is negative"))
}

#[derive(Debug, Args)]
struct CrdArgs {
    /// Write one file per CRD and a kustomization.yaml into DIR (created if
    /// missing) instead of printing.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(run_command(*args))
        }
        Command::Plan(args) => plan_command(&args),
        Command::Crd(args) => crd_command(&args),
    }
}

async fn run_command(args: RunArgs) -> anyhow::Result<ExitCode> {
    rollout_telemetry::logs::init(args.log_format);

    let client = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .with_context(|| format!("using {}", path.display()))?;
            kube::Client::try_from(config).context("building the Kubernetes client")?
        }
        None => kube::Client::try_default()
            .await
            .context("configuring the Kubernetes client")?,
    };
    let telemetry = Telemetry::new(&TracingOptions::from_env(
        rollout_controller::telemetry::DEFAULT_SERVICE_NAME,
    ))?;
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: args.gateway.clone(),
            timeout: args.hook_timeout,
            tls: args.gateway_tls()?,
        },
        telemetry.clone(),
    )?;
    let readiness = Readiness::default();
    if let Some(addr) = args.health_listen {
        let bound = health::serve(addr, readiness.clone())
            .await
            .with_context(|| format!("--health-listen {addr}"))?;
        tracing::info!(%bound, "serving /healthz and /readyz");
    }
    let options = Options {
        hub_name: args.hub_name.clone(),
        ..Options::default()
    };

    let registration = args.register_plugins_namespace.clone().map(|namespace| {
        let client = client.clone();
        tokio::spawn(async move { registration::watch_and_register(client, &namespace).await })
    });
    tracing::info!(gateway = %args.gateway, "rollout-controller running");
    let context = reconcile::Context::new(client, hooks, telemetry.clone(), options);
    reconcile::run(std::sync::Arc::new(context), readiness).await;
    if let Some(task) = registration {
        task.abort();
    }
    tracing::info!("rollout-controller stopped");
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    Ok(ExitCode::SUCCESS)
}

fn crd_command(args: &CrdArgs) -> anyhow::Result<ExitCode> {
    let Some(dir) = &args.out else {
        print!("{}", api::crds_yaml()?);
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for file in api::crd_files()? {
        let path = dir.join(&file.name);
        std::fs::write(&path, &file.contents)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn plan_command(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    // The input's `now` fixes the clock; the real one is only a fallback.
    let output = match plan::run(&args.input, Timestamp::now()) {
        Ok(output) => output,
        Err(err) => {
            eprintln!("rollout-controller plan: {err}");
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let text = if args.pretty {
        serde_json::to_string_pretty(&output)
    } else {
        serde_json::to_string(&output)
    }
    .context("encoding the plan")?;
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}
