//! Helpers shared by the end-to-end tests (each test file includes what it uses).

pub mod procs;
