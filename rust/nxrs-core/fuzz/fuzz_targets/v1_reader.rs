//! The v1 reader on arbitrary bytes, with the seed model as the layout: must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nxrs_core::nxck::{detect, v1};
use nxrs_core::{Trainer, TrainerConfig};
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static TEMPLATE: OnceLock<Trainer> = OnceLock::new();
    let template = TEMPLATE.get_or_init(|| Trainer::new(&TrainerConfig::seed_model(), 1).unwrap());
    let _ = detect(data);
    if let Ok(state) = v1::decode(data, template.state()) {
        // A file the reader accepts re-encodes to itself.
        assert_eq!(v1::encode(&state), data);
    }
});
