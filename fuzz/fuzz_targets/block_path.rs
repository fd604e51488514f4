#![no_main]
//! libFuzzer entry point; the property lives in `peerblock_fuzz::block_path`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| peerblock_fuzz::block_path(data));
