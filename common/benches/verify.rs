//! What serve-time verification costs the file store (issue 27), per block size:
//!
//! - `blake3/SIZE`: hashing one block (the cold, first-serve cost of a block file:
//!   `Manifest::verify_block` is a length check and this hash);
//! - `read_block_verified/SIZE`: `FileStore::read_block` of a page-cached block file whose
//!   identity is already in the verified table (open, fstat, table lookup, read: what a
//!   hot-cache miss costs once the file was verified), hot-block cache off;
//! - `read_block_cold/SIZE`: the same read with the verified table emptied before every
//!   read (a new store each time), so the block is hashed on every read: the first-serve
//!   cost (it includes loading and verifying the one-block manifest, about 100 bytes);
//! - `open_fstat/SIZE`: `File::open` and `fstat` of the block file, what the zero-copy
//!   path did per request before verification;
//! - `open_block_verified/SIZE`: `FileStore::open_block` of a verified file, what it does
//!   now (open, fstat, one look-up in the verified table).
//!
//! Run: `cargo bench -p peerblock-common --bench verify -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use peerblock_common::manifest::import;
use peerblock_common::store::{FileStore, StoreRead};
use peerblock_core::wire::BlockPath;

const SIZES: [usize; 3] = [4096, 256 * 1024, 1024 * 1024];

fn scratch(size: usize) -> (PathBuf, BlockPath) {
    let dir = std::env::temp_dir().join(format!(
        "peerblock-bench-verify-{}-{size}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let file = dir.join("in.bin");
    let data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&file, data).expect("input");
    let report = import(&file, &dir.join("store"), size as u64).expect("import");
    (
        dir.join("store"),
        BlockPath {
            key: report.chunk,
            index: 1,
        },
    )
}

fn verify(c: &mut Criterion) {
    let mut g = c.benchmark_group("verify");
    for size in SIZES {
        let block: Vec<u8> = (0..size).map(|i| (i * 7 % 253) as u8).collect();
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("blake3", size), &block, |b, block| {
            b.iter(|| blake3::hash(black_box(block)))
        });
        let (root, path) = scratch(size);
        let warm = FileStore::with_cache(&root, 1 << 26, 0);
        assert!(matches!(warm.read_block(&path), StoreRead::Found { .. }));
        g.bench_function(BenchmarkId::new("read_block_verified", size), |b| {
            b.iter(|| warm.read_block(black_box(&path)))
        });
        let file = warm.file_of(&path);
        g.bench_function(BenchmarkId::new("open_fstat", size), |b| {
            b.iter(|| {
                let f = std::fs::File::open(black_box(&file)).expect("open");
                f.metadata().expect("fstat").len()
            })
        });
        g.bench_function(BenchmarkId::new("open_block_verified", size), |b| {
            b.iter(|| warm.open_block(black_box(&path)))
        });
        g.bench_function(BenchmarkId::new("read_block_cold", size), |b| {
            b.iter(|| FileStore::with_cache(&root, 1 << 26, 0).read_block(black_box(&path)))
        });
        let _ = std::fs::remove_dir_all(root.parent().expect("scratch"));
    }
    g.finish();
}

criterion_group!(benches, verify);
criterion_main!(benches);
