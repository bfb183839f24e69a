//! The command line's shape: every command, argument and help text, as clap reads them, and
//! which function of [`crate::cmd`] runs each ([`Command::run`]). No other logic.

use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

use crate::cluster::Target;
use crate::cmd::{
    bake, bench, check, completions, down, heal, jobs, jupyter, plan, pull, push, run, scale,
    schema, ssh, ssh_config, stage, start, status, stop, tensorboard, top, up, validate,
};
use crate::context::Context;
use crate::error::Error;

/// The tool's version and the commit it was built from, as `--version` prints them (the
/// commit is "unknown" in a build outside a git checkout; see build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HVD_CLUSTER_COMMIT"),
    ")"
);

/// Turn one TOML profile into a working Horovod cluster on OpenStack, and remove it again.
///
/// Exit codes: 0 success (for `plan`: nothing to change), 1 failure while working (cloud,
/// SSH, tunnel, horovodrun, state folder), 2 bad input only (profile, arguments, a flavor,
/// image, network or interface the cloud does not know), 3 quota shortfall (nothing was
/// created), 10 `plan` found changes, 130 interrupted (run the command again to resume, or `down`
/// to remove everything).
///
/// Environment: HVD_CLUSTER_APT_MIRROR names the Debian mirror for image builds;
/// HVD_CLUSTER_LOCAL_CPUS (e.g. 0.25) gives every node container the local provider creates
/// that share of this machine's CPUs (`docker run --cpus`; unset or empty: no limit);
/// HVD_CLUSTER_SSH_WAIT sets `--ssh-wait` when the flag is not given.
#[derive(Parser, Debug)]
#[command(name = "hvd-cluster", version = VERSION, max_term_width = 100)]
pub struct Args {
    /// Folder holding each cluster's state and SSH key
    /// [default: $XDG_STATE_HOME/hvd-cluster, or ~/.local/state/hvd-cluster]
    #[arg(long, global = true, env = "HVD_CLUSTER_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Print only results and errors, no progress
    #[arg(long, short, global = true)]
    pub quiet: bool,

    /// Most concurrent cloud calls inside one step of the plan
    #[arg(
        long,
        global = true,
        env = "HVD_CLUSTER_PARALLEL",
        default_value_t = 8,
        value_name = "N"
    )]
    pub parallel: usize,

    /// Nodes each node passes the image on to while it receives it (a tree: the time grows
    /// with log N, not N); the number of workers or more gives the master serving every worker
    #[arg(
        long,
        global = true,
        env = "HVD_CLUSTER_FANOUT",
        default_value_t = 2,
        value_parser = clap::value_parser!(u16).range(1..=1024),
        value_name = "N"
    )]
    pub fanout: u16,

    /// Seconds each node gets to answer SSH when a command opens the cluster (`up`, `scale`,
    /// `heal`, `start`, `check`...), 10-7200 [default: 600, or HVD_CLUSTER_SSH_WAIT]: longer
    /// for servers that boot slowly (bare metal, an emulated guest). A server the command made
    /// or started that never answers ends it with the last lines of its console
    #[arg(long, global = true, value_parser = ssh_wait_arg, value_name = "SECS")]
    pub ssh_wait: Option<Duration>,

    #[command(subcommand)]
    pub command: Command,
}

/// `--ssh-wait` by the same grammar as its environment variable.
fn ssh_wait_arg(value: &str) -> Result<Duration, crate::input::Refused> {
    crate::input::parse_ssh_wait(value)
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
    /// Make a node image from a node of the running cluster (a worker by default), or with
    /// --temporary from a server of its own: Docker, the bootstrap's packages, the GPU driver
    /// and the Horovod image, without any cluster's keys, files, containers or logs. Boot
    /// servers from it with `image = "NAME"`
    #[command(
        after_help = "The node's cluster keys, login keys, SSH host keys, machine id, \
        cloud-init state, jobs, autostop agent, credentials, Docker logins, histories and logs are \
        set aside on a tmpfs while the cloud snapshots its root disk (OpenStack's createImage; on \
        the local provider the node container is committed and its Docker volume copied), then \
        put back; its containers are removed first and `up` makes them again, with the check. \
        Refused while a job is queued or running, for a stopped cluster, and for a node whose \
        /shared or staged data is on that disk. The image is private to the project and carries \
        its contents as properties (hvd_bake_*); a bake with the same contents (the server image's id, \
        the Horovod image's id, Docker's and the driver's versions) is found, not made again; a \
        name another image holds is refused before anything is made. `down` leaves a bake: it is \
        yours. `--list` shows the project's bakes (what each holds, which servers run from it), \
        `--delete NAME` deletes one after asking (refused while servers run from it). No cluster \
        is needed for either. `--temporary` needs no cluster either: it brings up a one-server \
        cluster CLUSTER-baking of the workers' flavor and image (no workers, no /shared, no \
        data, no autostop), checks it, bakes it and deletes it, also when the bake fails; cut \
        short, the same command again finishes it, and `down --cluster CLUSTER-baking` \
        deletes it."
    )]
    Bake {
        file: PathBuf,
        /// The node to bake (`worker-1`, `master`, or its full name); default: the first
        /// worker, else the master
        #[arg(long, conflicts_with_all = ["list", "delete", "temporary"])]
        node: Option<String>,
        /// Bake a server of its own, made for the bake and deleted after it (no cluster needed)
        #[arg(long, conflicts_with_all = ["list", "delete"])]
        temporary: bool,
        /// The image's name (default: CLUSTER-bake; 1-100 letters, digits, `.`, `_`, `-`)
        #[arg(long, conflicts_with_all = ["list", "delete"])]
        name: Option<String>,
        /// List the project's bakes instead of baking
        #[arg(long, conflicts_with = "delete")]
        list: bool,
        /// Delete the project's bake of this name or id instead of baking
        #[arg(long, value_name = "NAME")]
        delete: Option<String>,
        /// With --delete: delete without asking (for scripts)
        #[arg(long, short = 'y', requires = "delete")]
        yes: bool,
    },
    /// The acceptance check: containers, /shared, Jupyter, and an allreduce over every slot
    /// (refused while a job is queued or running; a job submitted meanwhile waits for it)
    Check {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Run a command with horovodrun over every slot, from the master's container, as a job:
    /// it runs on the master without this command, after the jobs submitted before it
    #[command(
        after_help = "Example: hvd-cluster run profiles/local.toml -- python /shared/train.py

        The job's output is followed until it ends, and `run` ends with its exit status.         Ctrl-C, a closed laptop or a lost connection stops following, never the job:         `hvd-cluster logs FILE ID --follow` follows it again, `hvd-cluster cancel FILE ID`         ends it."
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
        /// Copy a local file or folder into /shared/NAME (where the command runs) first, as
        /// `push` does; repeatable
        #[arg(long, value_name = "PATH")]
        send: Vec<PathBuf>,
        /// Open MPI arguments for horovodrun --mpi-args (collective = "mpi"), after
        /// hvd-cluster's own, e.g. "--display-map --timestamp-output"
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        mpi_args: Option<String>,
        /// Submit the job, print its number and return; it runs on the master without this
        /// command (`logs --follow` follows it, `cancel` ends it)
        #[arg(long, short = 'd')]
        detach: bool,
        /// Record Horovod's timeline (HOROVOD_TIMELINE) into the job's folder on /shared,
        /// /shared/jobs/N/timeline.json; `pull` brings it back, Perfetto opens it
        #[arg(long)]
        timeline: bool,
        /// The command each rank runs
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Copy a local folder (or file) into /shared on the cluster: only new or changed files
    /// travel, in one stream, each file under its name only once whole
    #[command(
        after_help = "Example: hvd-cluster push profiles/local.toml ./data            # to /shared/data
         hvd-cluster push profiles/local.toml ./code /shared/project --delete

Files are the same when size and mtime are (or, with --checksum, their content). .gitignore and \
.hvdignore are honoured in every folder of the tree, and --exclude adds patterns of the same \
grammar. Links are copied as links, never followed. The free space on the cluster is checked \
first. Interrupted (Ctrl-C, a lost link), the same command again sends only what is missing."
    )]
    Push {
        /// The cluster profile (TOML)
        file: PathBuf,
        /// The local folder or file to send
        local: PathBuf,
        /// Where it lands: a path below /shared (`/shared/a/b`, or `a/b`) [default: /shared/NAME]
        remote: Option<String>,
        #[command(flatten)]
        how: TransferArgs,
    },
    /// Copy a folder or file below /shared on the cluster to this machine: only new or changed
    /// files travel, each under its name only once whole
    #[command(
        after_help = "Example: hvd-cluster pull profiles/local.toml /shared/checkpoints   # to ./checkpoints
         hvd-cluster pull profiles/local.toml results/model.pt .

The local path is what the remote folder becomes (its contents are mirrored there); a file \
fetched into an existing folder lands in it under its own name. Interrupted, the same command \
again fetches only what is missing."
    )]
    Pull {
        /// The cluster profile (TOML)
        file: PathBuf,
        /// The folder or file on the cluster: a path below /shared (`/shared/a/b`, or `a/b`)
        remote: String,
        /// Where it lands here [default: ./NAME]
        local: Option<PathBuf>,
        #[command(flatten)]
        how: TransferArgs,
    },
    /// Copy a folder (or file) below /shared onto every node's own disk, /staged/NAME in the
    /// containers: sent once down a tree of the nodes, each passing the bytes on as it writes
    #[command(
        after_help = "Example: hvd-cluster push profiles/local.toml ./tiny-imagenet      # to /shared/tiny-imagenet
         hvd-cluster stage profiles/local.toml /shared/tiny-imagenet  # to /staged/tiny-imagenet on every node

Training then reads /staged/NAME at the speed of the node's own disk (the flavor's ephemeral \
disk where it has one, else its root disk) instead of over NFS. Only the nodes that lack \
something take part, and only what any of them lacks travels; every node's free space is \
checked first. Files are the same when size and mtime are (or, with --checksum, their \
content); --delete removes from the copies what the source no longer has. Interrupted, the \
same command again sends only what is missing. The cluster remembers it: `scale`, `heal`, \
`start` and `up` stage it onto the nodes that lack it before elastic discovery lists them."
    )]
    Stage {
        /// The cluster profile (TOML)
        file: PathBuf,
        /// The folder or file to copy: a path below /shared (`/shared/a/b`, or `a/b`)
        source: String,
        /// Delete from the copies what the source does not have
        #[arg(long)]
        delete: bool,
        /// Compare files by content hash (SHA-256, every node reads its copy), not size and mtime
        #[arg(long)]
        checksum: bool,
    },
    /// The cluster's jobs: number, state (queued, running, succeeded, failed with its exit
    /// status, cancelled, interrupted), slots, how long it ran, command
    #[command(after_help = "Example: hvd-cluster jobs profiles/local.toml --json")]
    Jobs {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Every node's CPU, memory, GPUs, network rate and free room on /shared and Docker's
    /// disk, and the running job (its number, time, last line and images/s where it prints
    /// them), refreshed live over the cluster's own SSH; `q` or Ctrl-C leaves
    #[command(after_help = "Example: hvd-cluster top profiles/local.toml --once

        One SSH connection per node for the whole view, nothing installed or listening on the         nodes; a node that does not answer within 5 s is shown as not answering. --once prints         one snapshot (two readings a second apart) as a table, --json as JSON.")]
    Top {
        file: PathBuf,
        /// One snapshot as a table, then exit
        #[arg(long)]
        once: bool,
        /// One snapshot as JSON, then exit
        #[arg(long)]
        json: bool,
        /// Seconds between refreshes of the live view, 1 to 60
        #[arg(long, value_name = "SECS", default_value_t = 2)]
        interval: u64,
    },
    /// A job's whole output from its first line (the latest job's without a number), kept on
    /// the master's disk after the job ends and across stop/start
    #[command(after_help = "Example: hvd-cluster logs profiles/local.toml 3 --follow

        With --follow it ends when the job does, with the job's exit status; Ctrl-C stops         following, never the job.")]
    Logs {
        file: PathBuf,
        /// The job's number (`jobs` lists them)
        id: Option<String>,
        /// Follow the output until the job ends
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// End a job: a queued one leaves the queue; a running one's horovodrun and every rank
    /// on every node are ended (TERM, then KILL after 5 s)
    #[command(after_help = "Example: hvd-cluster cancel profiles/local.toml 3")]
    Cancel {
        file: PathBuf,
        /// The job's number (`jobs` lists them)
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every queued and running job
        #[arg(long)]
        all: bool,
    },
    /// Scaling report: a synthetic ResNet training job with horovodrun at 1, 2, 4, ... slots
    /// (master first, then workers), images/s, speed-up, scaling efficiency and allreduce bus
    /// bandwidth; a table (or --json) and an SVG chart in the cluster's folder
    #[command(
        after_help = "Example: hvd-cluster bench profiles/local.toml --slots 1,2,3\n\n\
        Warm-up steps are not timed. Ctrl-C stops the job on every node (exit 130)."
    )]
    Bench {
        /// The cluster profile (TOML)
        file: PathBuf,
        /// Slot counts to run, comma-separated, each at most the cluster's slots
        /// [default: 1, 2, 4, ... and every slot]
        #[arg(long, value_name = "N,N,...")]
        slots: Option<String>,
        /// resnet8, resnet14 or resnet20 (CIFAR-style ResNets on 32x32 images)
        /// [default: resnet8]
        #[arg(long, value_name = "NAME")]
        model: Option<String>,
        /// Images per slot per step, 1 to 1024 [default: 32]
        #[arg(long, value_name = "N")]
        batch_size: Option<String>,
        /// tensorflow, pytorch, or auto: TensorFlow when the image carries it, else PyTorch
        /// [default: auto]
        #[arg(long, value_name = "NAME")]
        framework: Option<String>,
        /// Timed steps at each slot count, 1 to 10000 [default: 20]
        #[arg(long, value_name = "N")]
        steps: Option<String>,
        /// Untimed warm-up steps before them, 0 to 1000 [default: 2]
        #[arg(long, value_name = "N")]
        warmup: Option<String>,
        /// Machine-readable output (the chart is still written)
        #[arg(long)]
        json: bool,
    },
    /// Open SSH to a node (the master by default) through the cluster's ssh_config
    Ssh {
        file: PathBuf,
        /// Node name, with or without the cluster prefix (e.g. worker-1)
        node: Option<String>,
        /// A command to run instead of a shell; as with ssh, its words reach the node's shell as
        /// one line (quote what must stay one word there)
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Print the cluster's ssh_config (for `ssh -F`)
    SshConfig { file: PathBuf },
    /// Print a 127.0.0.1 Jupyter URL, keeping an SSH tunnel open when one is needed
    Jupyter { file: PathBuf },
    /// Serve TensorBoard from the master's container over a folder of /shared, through an SSH
    /// tunnel on 127.0.0.1, until Ctrl-C (then it is stopped on the master)
    #[command(
        after_help = "Every job's HVD_CLUSTER_LOG_DIR is /shared/logs/N (N its number), so the default folder         shows each job as a run. The image needs TensorBoard for its Python (our TensorFlow image has it)."
    )]
    Tensorboard {
        file: PathBuf,
        /// The folder to serve: a path below /shared [default: /shared/logs]
        logdir: Option<String>,
    },
    /// Show what exists and in which state, found by the cluster's tag
    Status {
        #[command(flatten)]
        target: TargetArgs,
        #[arg(long)]
        json: bool,
        /// Ask the master over SSH which workers elastic discovery lists (default: what
        /// hvd-cluster last wrote there, kept in the cluster's folder; no SSH)
        #[arg(long)]
        live: bool,
    },
    /// Stop every server (workers first, the master last) so the cluster holds no vCPUs, RAM
    /// or GPUs; disks, addresses, network, keys and /shared are kept. Safe to repeat
    #[command(
        after_help = "On OpenStack the servers are shelved (and offloaded by the cloud's default \
        shelved_offload_time = 0); locally the node containers are stopped. The image's archive \
        the master keeps for scale and heal is removed first (it would go into the shelve \
        snapshot). `start` (or `up`) brings the same cluster back."
    )]
    Stop {
        #[command(flatten)]
        target: TargetArgs,
        /// Stop even while a job is queued or running on the master (it is recorded
        /// interrupted); without it such a stop is refused
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
    },
    /// Start a stopped cluster again: its servers, then bootstrap and check as `up` does, and
    /// print the Jupyter URL
    Start { file: PathBuf },
    /// Delete everything tagged with the cluster, last created first; safe to repeat. Says
    /// first what goes (servers, disks, network pieces, what /shared holds, the jobs on
    /// record) and asks on a terminal
    #[command(
        after_help = "Without a terminal to ask on (a script, CI), `down` deletes nothing unless \
        --yes is given (exit 2). A cluster with nothing left to delete is not asked about. A volume \
        or share marked `storage.keep` (or taken by `storage.volume`, `storage.share`) is left in \
        place and named; a share loses the access rule the cluster added; the next `up` attaches \
        or opens it again."
    )]
    Down {
        #[command(flatten)]
        target: TargetArgs,
        /// Delete without asking (for scripts)
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Print the shell completion script for SHELL
    #[command(
        after_help = "For example: `hvd-cluster completions bash > ~/.local/share/bash-completion/completions/hvd-cluster`, \
        `hvd-cluster completions zsh > ~/.zfunc/_hvd-cluster` (with ~/.zfunc in fpath), \
        `hvd-cluster completions fish > ~/.config/fish/completions/hvd-cluster.fish`."
    )]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the profile's JSON Schema (what editors such as taplo complete and check keys with)
    #[command(
        after_help = "The repository ships the same as profiles/profile.schema.json; a profile names it on its first line with `#:schema ./profile.schema.json` (a path relative to the profile, or a URL). What a schema cannot say (CIDRs, idle times, names the cloud must know) only `validate` checks."
    )]
    Schema,
    /// Print the man page (roff), made from the same definitions as --help
    #[command(
        after_help = "For example: `hvd-cluster man > ~/.local/share/man/man1/hvd-cluster.1`, or read it at once with `hvd-cluster man | man -l -`."
    )]
    Man,
}

/// How `push` and `pull` compare and what they delete.
#[derive(clap::Args, Debug)]
pub struct TransferArgs {
    /// Delete at the destination what the source does not have (excluded names are kept)
    #[arg(long)]
    pub delete: bool,
    /// Compare files by content hash (SHA-256, both sides read every file), not size and mtime
    #[arg(long)]
    pub checksum: bool,
    /// Leave out names matching PATTERN (.gitignore's grammar); repeatable
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Never compress (by default zstd is used where a sample of the files compresses)
    #[arg(long)]
    pub no_compress: bool,
}

impl From<TransferArgs> for crate::transfer::Options {
    fn from(a: TransferArgs) -> Self {
        crate::transfer::Options {
            delete: a.delete,
            checksum: a.checksum,
            excludes: a.exclude,
            no_compress: a.no_compress,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct TargetArgs {
    /// The cluster profile (TOML)
    pub file: Option<PathBuf>,
    /// The cluster's name, when no profile is at hand: 1-40 lowercase letters, digits and
    /// dashes, starting with a letter (never a path)
    #[arg(
        long,
        conflicts_with = "file",
        required_unless_present = "file",
        value_name = "NAME"
    )]
    pub cluster: Option<String>,
    /// clouds.yaml entry to use with --cluster [default: the saved one, or $OS_CLOUD]
    #[arg(long, requires = "cluster")]
    pub cloud: Option<String>,
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

impl Command {
    /// Whether the command handles Ctrl-C itself (stopping what it started on the nodes), so
    /// that `main` must not drop it at the first signal.
    pub fn handles_interrupt(&self) -> bool {
        matches!(
            self,
            Command::Bench { .. }
                | Command::Run { .. }
                | Command::Logs { .. }
                | Command::Push { .. }
                | Command::Pull { .. }
                | Command::Stage { .. }
                | Command::Top { .. }
                | Command::Tensorboard { .. }
        )
    }

    /// Runs one parsed command.
    pub async fn run(self, ctx: &mut Context) -> Result<u8, Error> {
        match self {
            Command::Validate { file } => validate::validate(ctx, &file).await,
            Command::Plan { file, json } => plan::plan(ctx, &file, json).await,
            Command::Up { file, infra_only } => up::up(ctx, &file, infra_only).await,
            Command::Scale {
                file,
                workers,
                drain_grace,
            } => {
                ctx.drain_grace = Duration::from_secs(drain_grace);
                scale::scale(ctx, &file, workers).await
            }
            Command::Heal {
                file,
                watch,
                drain_grace,
            } => {
                ctx.drain_grace = Duration::from_secs(drain_grace);
                heal::heal(ctx, &file, watch.map(Duration::from_secs)).await
            }
            Command::Bake {
                file,
                node,
                temporary,
                name,
                list,
                delete,
                yes,
            } => match (list, delete) {
                (true, _) => bake::list(ctx, &file).await,
                (false, Some(wanted)) => bake::delete(ctx, &file, &wanted, yes).await,
                (false, None) if temporary => bake::temporary(ctx, &file, name.as_deref()).await,
                (false, None) => bake::bake(ctx, &file, node.as_deref(), name.as_deref()).await,
            },
            Command::Check { file, json } => check::check(ctx, &file, json).await,
            Command::Run {
                file,
                elastic,
                min_np,
                max_np,
                send,
                mpi_args,
                detach,
                timeline,
                command,
            } => {
                run::run(
                    ctx,
                    &file,
                    elastic.then_some((min_np, max_np)),
                    &send,
                    mpi_args.as_deref(),
                    detach,
                    timeline,
                    &command,
                )
                .await
            }
            Command::Push {
                file,
                local,
                remote,
                how,
            } => push::push(ctx, &file, &local, remote.as_deref(), &how.into()).await,
            Command::Pull {
                file,
                remote,
                local,
                how,
            } => pull::pull(ctx, &file, &remote, local.as_deref(), &how.into()).await,
            Command::Stage {
                file,
                source,
                delete,
                checksum,
            } => {
                let opts = crate::transfer::Options {
                    delete,
                    checksum,
                    ..Default::default()
                };
                stage::stage(ctx, &file, &source, &opts).await
            }
            Command::Jobs { file, json } => jobs::list(ctx, &file, json).await,
            Command::Top {
                file,
                once,
                json,
                interval,
            } => top::top(ctx, &file, once, json, interval).await,
            Command::Logs { file, id, follow } => {
                jobs::logs(ctx, &file, id.as_deref(), follow).await
            }
            Command::Cancel { file, id, all } => jobs::cancel(ctx, &file, id.as_deref(), all).await,
            Command::Bench {
                file,
                slots,
                model,
                batch_size,
                framework,
                steps,
                warmup,
                json,
            } => {
                let raw = crate::bench::Raw {
                    slots: slots.as_deref(),
                    model: model.as_deref(),
                    batch_size: batch_size.as_deref(),
                    framework: framework.as_deref(),
                    steps: steps.as_deref(),
                    warmup: warmup.as_deref(),
                };
                bench::bench(ctx, &file, &raw, json).await
            }
            Command::Ssh {
                file,
                node,
                command,
            } => ssh::ssh(ctx, &file, node.as_deref(), &command).await,
            Command::SshConfig { file } => ssh_config::ssh_config(ctx, &file).await,
            Command::Jupyter { file } => jupyter::jupyter(ctx, &file).await,
            Command::Tensorboard { file, logdir } => {
                tensorboard::tensorboard(ctx, &file, logdir.as_deref()).await
            }
            Command::Status { target, json, live } => {
                status::status(ctx, target.into(), json, live).await
            }
            Command::Stop {
                target,
                force,
                json,
            } => stop::stop(ctx, target.into(), force, json).await,
            Command::Start { file } => start::start(ctx, &file).await,
            Command::Down { target, yes } => down::down(ctx, target.into(), yes).await,
            Command::Completions { shell } => completions::completions(shell, Args::command()),
            Command::Man => completions::man_page(Args::command()),
            Command::Schema => schema::schema(),
        }
    }
}
