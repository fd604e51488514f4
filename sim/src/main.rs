//! The peerblock cluster simulator (not built yet; see docs/sim.md once it lands).

fn main() {
    eprintln!("sim: the simulator is not built yet");
    std::process::exit(2);
}
