//! `sim SCENARIO.toml [options]`: see `sim --help` and docs/sim.md.

fn main() {
    std::process::exit(sim::cli::main(std::env::args().skip(1).collect()));
}
