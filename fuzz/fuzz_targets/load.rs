#![no_main]
//! libFuzzer entry point; the property lives in `peerblock_fuzz::load`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| peerblock_fuzz::load(data));
