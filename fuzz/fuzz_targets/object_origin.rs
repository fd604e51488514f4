#![no_main]
//! libFuzzer entry point; the property lives in `peerblock_fuzz::object_origin`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| peerblock_fuzz::object_origin(data));
