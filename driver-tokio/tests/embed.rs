//! `examples/embed.rs` (docs/integrating.md, "Embed a driver") runs to completion: it
//! serves its own block on loopback and reads it back through the reader.

#[path = "../examples/embed.rs"]
mod embed;

#[test]
fn the_embed_example_serves_its_own_block_and_reads_it_back() {
    embed::main().expect("the example reads its block back");
}
