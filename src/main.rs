//! The `hvd-cluster` command line. Thin: parses arguments ([`hvd_cluster::args`]), runs one
//! command ([`hvd_cluster::args::Command::run`]), maps the outcome to an exit code scripts can rely on.

use std::process::ExitCode;

use clap::Parser;

use hvd_cluster::args::Args;
use hvd_cluster::context::Context;
use hvd_cluster::error::Error;
use hvd_cluster::input::SSH_WAIT_VAR;
use hvd_cluster::interrupt;

fn main() -> ExitCode {
    let args = Args::parse();
    let mut ctx = Context::new(args.state_dir, args.quiet, args.parallel);
    ctx.fanout = usize::from(args.fanout);
    // The flag, else its variable (checked by its grammar before anything happens).
    let ssh_wait = match args.ssh_wait {
        Some(wait) => Ok(Some(wait)),
        None => hvd_cluster::input::ssh_wait_from(std::env::var_os(SSH_WAIT_VAR).as_deref()),
    };
    match ssh_wait {
        Ok(wait) => ctx.ssh_wait = wait.unwrap_or(ctx.ssh_wait),
        Err(e) => {
            let e = Error::Usage(e.to_string());
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    }
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
        // A command that stops its own work on the nodes hears Ctrl-C itself.
        if args.command.handles_interrupt() {
            return args.command.run(&mut ctx).await;
        }
        let command = args.command.run(&mut ctx);
        tokio::pin!(command);
        tokio::select! {
            result = &mut command => return result,
            _ = tokio::signal::ctrl_c() => {}
        }
        // Ctrl-C: nothing new is made, and a create the cloud is answering finishes and is
        // recorded first (hvd_cluster::interrupt); a second Ctrl-C, or a minute, ends it now.
        interrupt::GATE.request();
        if interrupt::GATE.under_way() > 0 {
            eprintln!(
                "interrupted: letting {} call(s) to the cloud finish (Ctrl-C again to stop now)",
                interrupt::GATE.under_way()
            );
            let settled = async {
                while interrupt::GATE.under_way() > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            };
            tokio::select! {
                _ = &mut command => {}
                _ = settled => {}
                _ = tokio::signal::ctrl_c() => {}
                _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
            }
        }
        Err(Error::Interrupted)
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
