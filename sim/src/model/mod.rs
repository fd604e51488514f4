//! The modelled world: content placement, nodes and readers.

pub mod cache;
pub mod content;
pub mod node;
pub mod reader;
pub mod routing;
