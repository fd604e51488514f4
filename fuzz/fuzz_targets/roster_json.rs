#![no_main]
//! libFuzzer entry point; the property lives in `peerblock_fuzz::roster_json`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| peerblock_fuzz::roster_json(data));
