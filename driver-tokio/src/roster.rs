//! Being built (issue 10).
