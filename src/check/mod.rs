//! TODO

pub mod cli;
