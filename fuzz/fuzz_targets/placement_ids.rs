#![no_main]
//! libFuzzer entry point; the property lives in `peerblock_fuzz::placement_ids`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| peerblock_fuzz::placement_ids(data));
