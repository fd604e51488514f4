//! The behaviours every driver must show, one function per rule; [`conformance_suite!`]
//! turns each into a `#[test]`.
