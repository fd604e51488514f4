//! `peerblock-node`: being built (issue 10). It exits with an error until then.

fn main() -> std::process::ExitCode {
    eprintln!("peerblock-node: not built yet (issue 10)");
    std::process::ExitCode::FAILURE
}
