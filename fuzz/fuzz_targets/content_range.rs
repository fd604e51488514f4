#![no_main]
//! libFuzzer entry point; the property lives in `peerblock_fuzz::content_range`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| peerblock_fuzz::content_range(data));
