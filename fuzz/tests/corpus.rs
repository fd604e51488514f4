//! Replays every committed corpus file through the fuzz targets' property functions, so
//! stable `cargo test` exercises the same checks as `cargo fuzz run` (without libFuzzer).

use std::path::Path;

fn replay(target: &str, property: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {target} is empty");
    for file in files {
        let data = std::fs::read(&file).expect("read corpus file");
        let outcome = std::panic::catch_unwind(|| property(&data));
        assert!(
            outcome.is_ok(),
            "{target}: property failed on {}",
            file.display()
        );
    }
}

#[test]
fn request_decoder_corpus() {
    replay("request_decoder", peerblock_fuzz::request_decoder);
}

#[test]
fn response_decoder_corpus() {
    replay("response_decoder", peerblock_fuzz::response_decoder);
}

#[test]
fn chunked_decoder_corpus() {
    replay("chunked_decoder", peerblock_fuzz::chunked_decoder);
}

#[test]
fn block_path_corpus() {
    replay("block_path", peerblock_fuzz::block_path);
}

#[test]
fn hop_corpus() {
    replay("hop", peerblock_fuzz::hop);
}

#[test]
fn roster_json_corpus() {
    replay("roster_json", peerblock_fuzz::roster_json);
}

#[test]
fn epoch_corpus() {
    replay("epoch", peerblock_fuzz::epoch);
}

#[test]
fn load_corpus() {
    replay("load", peerblock_fuzz::load);
}

#[test]
fn placement_ids_corpus() {
    replay("placement_ids", peerblock_fuzz::placement_ids);
}

#[test]
fn server_connection_corpus() {
    replay("server_connection", peerblock_fuzz::server_connection);
}

#[test]
fn exchange_corpus() {
    replay("exchange", peerblock_fuzz::exchange);
}

#[test]
fn signed_record_corpus() {
    replay("signed_record", peerblock_fuzz::signed_record);
}

#[test]
fn content_range_corpus() {
    replay("content_range", peerblock_fuzz::content_range);
}

#[test]
fn object_origin_corpus() {
    replay("object_origin", peerblock_fuzz::object_origin);
}
