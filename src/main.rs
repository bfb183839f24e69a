//! The `hvd-cluster` command line. Thin: parses arguments, runs one command, maps the
//! outcome to an exit code scripts can rely on.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use hvd_cluster::cli::{self, Target};

/// Turn one TOML profile into a working Horovod cluster on OpenStack, and remove it again.
///
/// Exit codes: 0 success (for `plan`: nothing to change), 1 failure while working (cloud,
/// SSH, tunnel, horovodrun, state folder), 2 bad input only (profile, arguments, a flavor,
/// image, network or interface the cloud does not know), 3 quota shortfall (nothing was
/// created), 10 `plan` found changes, 130 interrupted (run `up` again to resume, or `down`
/// to remove everything).
#[derive(Parser, Debug)]
#[command(name = "hvd-cluster", version, max_term_width = 100)]
struct Args {
    /// Folder holding each cluster's state and SSH key
    /// [default: $XDG_STATE_HOME/hvd-cluster, or ~/.local/state/hvd-cluster]
    #[arg(long, global = true, env = "HVD_CLUSTER_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Print only results and errors, no progress
    #[arg(long, short, global = true)]
    quiet: bool,

    /// Most concurrent cloud calls inside one step of the plan
    #[arg(
        long,
        global = true,
        env = "HVD_CLUSTER_PARALLEL",
        default_value_t = 8,
        value_name = "N"
    )]
    parallel: usize,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check a profile without any network call
    Validate {
        /// The cluster profile (TOML)
        file: PathBuf,
    },
    /// Resolve names, check quotas and print what `up` would create, keep or delete; changes nothing
    Plan {
        file: PathBuf,
        /// Machine-readable output
        #[arg(long)]
        json: bool,
    },
    /// Create or converge the cluster, bootstrap every node over SSH, prove with a real
    /// horovodrun that all ranks join, and print the Jupyter URL
    Up {
        file: PathBuf,
        /// Stop once the cloud resources exist (no SSH bootstrap)
        #[arg(long)]
        infra_only: bool,
    },
    /// Grow or shrink the workers while elastic training runs (updates workers.count in FILE)
    Scale {
        file: PathBuf,
        /// The new number of workers
        #[arg(long)]
        workers: u32,
        /// Seconds leaving workers get to quit a running job before they are deleted
        #[arg(long, default_value_t = 20, value_name = "SECS")]
        drain_grace: u64,
    },
    /// Replace workers that are gone or broken, then list the replacements for elastic jobs
    Heal {
        file: PathBuf,
        /// Keep healing, checking every this many seconds
        #[arg(long, value_name = "SECS")]
        watch: Option<u64>,
        /// Seconds broken workers get to leave a running job before they are deleted
        #[arg(long, default_value_t = 5, value_name = "SECS")]
        drain_grace: u64,
    },
    /// The acceptance check: containers, /shared, Jupyter, and an allreduce over every slot
    Check {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Run a command with horovodrun over every slot, from the master's container
    #[command(
        after_help = "Example: hvd-cluster run profiles/local.toml -- python /shared/train.py"
    )]
    Run {
        file: PathBuf,
        /// Elastic mode: workers from the discovery script, which `scale` and `heal` maintain
        #[arg(long)]
        elastic: bool,
        /// Fewest processes an elastic job runs with [default: 1]
        #[arg(long, requires = "elastic")]
        min_np: Option<u32>,
        /// Most processes an elastic job grows to [default: every slot now]
        #[arg(long, requires = "elastic")]
        max_np: Option<u32>,
        /// Copy a local file into /shared (where the command runs) first; repeatable
        #[arg(long, value_name = "FILE")]
        send: Vec<PathBuf>,
        /// The command each rank runs
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Open SSH to a node (the master by default) through the cluster's ssh_config
    Ssh {
        file: PathBuf,
        /// Node name, with or without the cluster prefix (e.g. worker-1)
        node: Option<String>,
        /// A command to run instead of a shell
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Print the cluster's ssh_config (for `ssh -F`)
    SshConfig { file: PathBuf },
    /// Print a 127.0.0.1 Jupyter URL, keeping an SSH tunnel open when one is needed
    Jupyter { file: PathBuf },
    /// Show what exists and in which state, found by the cluster's tag
    Status {
        #[command(flatten)]
        target: TargetArgs,
        #[arg(long)]
        json: bool,
    },
    /// Delete everything tagged with the cluster, last created first; safe to repeat
    Down {
        #[command(flatten)]
        target: TargetArgs,
    },
}

#[derive(clap::Args, Debug)]
struct TargetArgs {
    /// The cluster profile (TOML)
    file: Option<PathBuf>,
    /// The cluster's name, when no profile is at hand: 1-40 lowercase letters, digits and
    /// dashes, starting with a letter (never a path)
    #[arg(
        long,
        conflicts_with = "file",
        required_unless_present = "file",
        value_name = "NAME"
    )]
    cluster: Option<String>,
    /// clouds.yaml entry to use with --cluster [default: the saved one, or $OS_CLOUD]
    #[arg(long, requires = "cluster")]
    cloud: Option<String>,
}

impl From<TargetArgs> for Target {
    fn from(t: TargetArgs) -> Target {
        match (t.file, t.cluster) {
            (Some(file), _) => Target::Profile(file),
            (None, Some(name)) => Target::Cluster {
                name,
                cloud: t.cloud,
            },
            // clap enforces one of the two.
            (None, None) => Target::Cluster {
                name: String::new(),
                cloud: t.cloud,
            },
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut ctx = cli::Context::new(args.state_dir, args.quiet, args.parallel);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(async {
        let work = async {
            match args.command {
                Command::Validate { file } => cli::validate(&ctx, &file).await,
                Command::Plan { file, json } => cli::plan(&ctx, &file, json).await,
                Command::Up { file, infra_only } => cli::up(&ctx, &file, infra_only).await,
                Command::Scale {
                    file,
                    workers,
                    drain_grace,
                } => {
                    ctx.drain_grace = std::time::Duration::from_secs(drain_grace);
                    cli::scale(&ctx, &file, workers).await
                }
                Command::Heal {
                    file,
                    watch,
                    drain_grace,
                } => {
                    ctx.drain_grace = std::time::Duration::from_secs(drain_grace);
                    cli::heal(&mut ctx, &file, watch.map(std::time::Duration::from_secs)).await
                }
                Command::Check { file, json } => cli::check(&ctx, &file, json).await,
                Command::Run {
                    file,
                    elastic,
                    min_np,
                    max_np,
                    send,
                    command,
                } => {
                    cli::run(
                        &ctx,
                        &file,
                        elastic.then_some((min_np, max_np)),
                        &send,
                        &command,
                    )
                    .await
                }
                Command::Ssh {
                    file,
                    node,
                    command,
                } => cli::ssh(&ctx, &file, node.as_deref(), &command).await,
                Command::SshConfig { file } => cli::ssh_config(&ctx, &file).await,
                Command::Jupyter { file } => cli::jupyter(&ctx, &file).await,
                Command::Status { target, json } => cli::status(&ctx, target.into(), json).await,
                Command::Down { target } => cli::down(&ctx, target.into()).await,
            }
        };
        tokio::select! {
            result = work => result,
            _ = tokio::signal::ctrl_c() => Err(cli::Error::Interrupted),
        }
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
