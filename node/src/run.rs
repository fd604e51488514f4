//! What the binary runs: each command's plan (validated by [`crate::node`]) run by the
//! module that owns the command. The top of the node's modules: it imports them, none of
//! them imports it.

use crate::node::{FetchPlan, GetPlan, NodeError, ServePlan, SwarmArgs};

/// Runs the node: binds `plan.listen`, serves the store, runs the roster service and
/// (with `plan.metrics`) the metrics endpoint until interrupted.
pub async fn serve_node(plan: ServePlan) -> Result<(), NodeError> {
    crate::cmd::serve(plan).await
}

/// `check`'s plan and command (kept with the command in [`crate::check`]).
pub use crate::check::{check, plan_check, CheckPlan};

/// Validates `swarm`'s arguments and scenario. Starts nothing.
pub fn plan_swarm(args: &SwarmArgs) -> Result<crate::swarm::SwarmPlan, NodeError> {
    crate::swarm::plan(
        &args.scenario,
        args.seed,
        args.scale,
        args.json.clone(),
        args.driver,
        args.max_downloads,
        args.quiet,
        args.keep,
        args.work_dir.clone(),
    )
}

/// Downloads the file: reads the manifest (block 0, validated against the chunk key) and
/// every block (validated against the manifest) through the read engine, `parallel` at
/// a time, writes them to a temporary file renamed to `output` once complete, and
/// reports which peers served how much and each failed block's outcome class.
pub async fn fetch(plan: FetchPlan) -> Result<(), NodeError> {
    crate::cmd::fetch(plan).await
}

/// One exchange with `plan.peer` for the block (`get_validated` with `expected`, plain
/// `get` otherwise); writes the body, or reports the outcome class on failure.
pub async fn get(plan: GetPlan) -> Result<(), NodeError> {
    crate::cmd::get(plan).await
}
