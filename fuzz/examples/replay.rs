//! Runs one machine property on one file: `cargo run -p peerblock-fuzz --example replay -- <target> <file>`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let data = std::fs::read(&args[2]).expect("read input");
    match args[1].as_str() {
        "server_connection" => peerblock_fuzz::server_connection(&data),
        "exchange" => peerblock_fuzz::exchange(&data),
        other => panic!("unknown target {other}"),
    }
}
