//! lavender's integration tests, one binary (one link of the test kit and its
//! dependencies) with a module per subject. Run one subject with
//! `cargo test -p lavender --test it <module>::`.

mod status_schema;
