//! nxrs-core: bit-reproducible neural-network training with exact checkpoint/resume.
//!
//! All training arithmetic runs on [`softf32::F32`], IEEE 754 binary32 implemented with integer
//! operations in a fixed order, so a run gives the same bits on every CPU and under every compiler
//! flag. This crate has no Python in it; `nxrs-py` wraps it.

pub mod softf32;
