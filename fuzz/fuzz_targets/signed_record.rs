#![no_main]
//! libFuzzer entry point; the property lives in `peerblock_fuzz::signed_record`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| peerblock_fuzz::signed_record(data));
