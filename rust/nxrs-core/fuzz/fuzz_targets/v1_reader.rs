//! The v1 reader on arbitrary bytes, with the seed model's tensor sizes as the layout: must
//! never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nxrs_core::nxck::{detect, v1, Record, TensorRecord};
use nxrs_core::{Trainer, TrainerConfig};
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static LENS: OnceLock<Vec<usize>> = OnceLock::new();
    let lens = LENS.get_or_init(|| {
        let t = Trainer::new(TrainerConfig::seed_model()).unwrap();
        t.state().tensors().iter().map(|c| c.len()).collect()
    });
    let _ = detect(data);
    if let Ok((scalars, tensors)) = v1::decode(data, lens) {
        // A file the reader accepts re-encodes to itself.
        let record = Record {
            config: String::new(),
            scalars: v1::SCALARS.into_iter().zip(scalars).collect(),
            tensors: tensors
                .iter()
                .enumerate()
                .map(|(k, cells)| TensorRecord {
                    name: format!("t{k}"),
                    shape: vec![cells.len()],
                    cells,
                })
                .collect(),
            metadata: Vec::new(),
        };
        assert_eq!(v1::encode(&record).unwrap(), data);
    }
});
