//! `peerblock-node`: a peerblock storage node. See docs/node.md for the operator's manual.
//!
//! The command line and its validation live in `peerblock_node::node`; this file sets up
//! logging, runs the chosen command and maps its result to an exit code.

use std::process::ExitCode;

use clap::Parser;
use peerblock_node::manifest;
use peerblock_node::node::{self, Cli, Command, ImportArgs, NodeError};
use peerblock_node::progress::Progress;
use peerblock_node::run;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `swarm` runs hundreds of clients whose expected failures (NAT'd nodes, refusals)
    // would drown its progress lines: errors only unless RUST_LOG says otherwise.
    let default = match cli.command {
        Command::Swarm(_) => "error",
        _ => "info",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(()) => ExitCode::from(node::EXIT_OK),
        Err(e) => {
            eprintln!("peerblock-node: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(cli: Cli) -> Result<(), NodeError> {
    match cli.command {
        Command::Import(args) => import(&args),
        Command::Serve(args) => {
            let plan = node::plan_serve(&args)?;
            let how = if plan.id_derived {
                format!(" (derived from the name {:?})", args.id)
            } else {
                String::new()
            };
            eprintln!("peerblock-node: node id {}{how}", plan.node_id);
            runtime()?.block_on(run::serve_node(plan))
        }
        Command::Fetch(args) => {
            let plan = node::plan_fetch(&args)?;
            runtime()?.block_on(run::fetch(plan))
        }
        Command::Get(args) => {
            let plan = node::plan_get(&args)?;
            runtime()?.block_on(run::get(plan))
        }
        Command::Check(args) => {
            let plan = run::plan_check(&args)?;
            runtime()?.block_on(run::check(plan))
        }
        Command::Swarm(args) => {
            let plan = run::plan_swarm(&args)?;
            runtime()?.block_on(peerblock_node::swarm::swarm(plan))
        }
        Command::Key(cmd) => {
            print!("{}", peerblock_node::identity::key_command(&cmd)?);
            Ok(())
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, NodeError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| NodeError::Io {
            what: "cannot start the tokio runtime",
            path: String::new(),
            source,
        })
}

/// `import`: the chunk key on stdout, a summary (and progress) on stderr.
fn import(args: &ImportArgs) -> Result<(), NodeError> {
    let size = std::fs::metadata(&args.file)
        .map_err(|source| NodeError::Io {
            what: "cannot read",
            path: args.file.display().to_string(),
            source,
        })?
        .len();
    let mut progress = Progress::new(format!("import {}", args.file.display()), size);
    let report = manifest::import_with_progress(&args.file, &args.store, args.block_size, |done| {
        progress.set(done)
    });
    progress.finish();
    let report = report?;
    println!("{}", report.chunk);
    eprintln!(
        "imported {}: {} bytes in {} blocks of {} bytes into {}{}",
        args.file.display(),
        report.bytes,
        report.blocks,
        args.block_size,
        manifest::chunk_dir(&args.store, &report.chunk).display(),
        if report.already_present {
            " (already in the store)"
        } else {
            ""
        }
    );
    if report.already_present {
        if report.repaired.is_empty() {
            eprintln!("the stored copy verified: nothing to repair");
        }
        for r in &report.repaired {
            let what = if r.index == 0 {
                "the manifest (block 0)".to_owned()
            } else {
                format!("block {}", r.index)
            };
            eprintln!("repaired {what}: it was {}", r.was);
        }
    }
    Ok(())
}
