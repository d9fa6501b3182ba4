//! The Rust core against the golden fixture made by the independent numpy reference
//! (`tests/golden/seed.json`, from `tests/reference/seed_ref.py`): the same numbers pytest checks
//! through the Python package, so the core and the package agree on them.
//!
//! The full-state hashes cover five scalars (`docs/TRAINING.md` section 11): epoch, b1t, b2t,
//! step (one per sample in the seed run) and batch (0 at epoch boundaries).

#[path = "support/backends.rs"]
mod backends;

use backends::backends;
use nxrs_core::backend::Backend;
use nxrs_core::checkpoint;
use nxrs_core::dataset::Dataset;
use nxrs_core::nxck::v2::{Checkpoint, Verify};
use nxrs_core::nxck::{mapped::FileBytes, v1, Format};
use nxrs_core::{Trainer, TrainerConfig};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn golden() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/golden/seed.json");
    let text = std::fs::read_to_string(path).expect("tests/golden/seed.json is in the repository");
    serde_json::from_str(&text).expect("valid JSON")
}

/// The file the seed's `ckpt_save` writes of `t`'s state: its record in the v1 layout. `t` here
/// is configured with seed 99 (the seed's `mk_state(99)`) and holds a seed-1 run's state, which
/// `checkpoint::encode` refuses to write as v1 (the file would load with seed 1); the seed's
/// program writes the state's bytes all the same, and those are what the fixture holds.
fn seeds_file(t: &Trainer) -> Vec<u8> {
    v1::encode(&checkpoint::record(t)).unwrap()
}

fn u64_at(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a u64"))
}

fn i64s(v: &Value) -> Vec<i64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_i64().expect("an integer"))
        .collect()
}

fn seed_trainer(seed: i64, backend: Backend) -> Trainer {
    let mut t = Trainer::new(TrainerConfig::seed_style(vec![6, 10, 4], seed)).unwrap();
    t.set_backend(backend).unwrap();
    t
}

/// The other backend (the same one where only softf32 is available): resumed runs switch.
fn other(backend: Backend) -> Backend {
    match (backend, backends().len()) {
        (Backend::Soft, 2) => Backend::Hw,
        _ => Backend::Soft,
    }
}

#[test]
fn the_seed_model_is_the_seed_style_with_seed_1() {
    assert_eq!(
        TrainerConfig::seed_model(),
        TrainerConfig::seed_style(vec![6, 10, 4], 1)
    );
}

#[test]
fn init_hashes() {
    let g = golden();
    for (seed, key) in [(1, "init"), (99, "fresh_init")] {
        let t = seed_trainer(seed, Backend::Soft);
        assert_eq!(t.seed_hash(), u64_at(&g[key], "seed_hash"), "{key}");
        assert_eq!(t.state_hash(), u64_at(&g[key], "state_hash"), "{key}");
    }
}

#[test]
fn first_step() {
    for backend in backends() {
        let g = &golden()["first_step"];
        let data = Dataset::seed(8, 6, 4);
        let mut t = seed_trainer(1, backend);
        // A step on an explicit sample: step advances, epoch and batch do not.
        t.step(&data, &[0]).unwrap();
        let bits = |k: usize| -> Vec<u64> {
            t.state().params[k]
                .w
                .iter()
                .map(|c| u64::from(c.to_bits()))
                .collect()
        };
        let want = |key: &str| -> Vec<u64> {
            g[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        };
        assert_eq!(bits(0), want("W1_bits"));
        assert_eq!(bits(1), want("W2_bits"));
        assert_eq!(t.state().scalars().to_vec(), i64s(&g["scalars"]));
        assert_eq!(t.state_hash(), u64_at(g, "state_hash"));
    }
}

#[test]
fn epochs_and_v1_bytes() {
    for backend in backends() {
        let g = golden();
        let data = Dataset::seed(8, 6, 4);
        let mut t = seed_trainer(1, backend);
        for epoch in ["1", "400", "800"] {
            let want = &g["epochs"][epoch];
            t.train_until(&data, epoch.parse().unwrap()).unwrap();
            assert_eq!(t.seed_hash(), u64_at(want, "seed_hash"), "epoch {epoch}");
            assert_eq!(t.state_hash(), u64_at(want, "state_hash"), "epoch {epoch}");
            let s = t.state();
            assert_eq!(u64::from(s.b1t.to_bits()), u64_at(want, "b1t_bits"));
            assert_eq!(u64::from(s.b2t.to_bits()), u64_at(want, "b2t_bits"));
            assert_eq!(
                s.scalars().to_vec(),
                i64s(&want["scalars"]),
                "epoch {epoch}"
            );
            let bytes = checkpoint::encode(&t, Format::V1).unwrap();
            assert_eq!(bytes.len() as u64, u64_at(want, "v1_len"));
            let digest: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(digest, want["v1_sha256"].as_str().unwrap(), "epoch {epoch}");
        }
    }
}

/// The seed's T1-T4 through a v1 file: train 400 epochs, save, load into a fresh trainer
/// (mk_state(99) overwritten, as the seed's ckpt_load does), train to 800. v1 stores no step
/// counter, so the resumed run counts its steps from 0: every tensor, the epoch and Adam's
/// powers equal the uninterrupted run's (the seed hash, the v1 bytes), the step counter is
/// 3200 behind, and with it set the full-state hash is the fixture's.
#[test]
fn resume_from_v1_in_a_fresh_trainer_equals_uninterrupted() {
    for backend in backends() {
        let g = golden();
        let data = Dataset::seed(8, 6, 4);
        let mut first = seed_trainer(1, backend);
        first.train_until(&data, 400).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seed.ckpt");
        checkpoint::save(&first, &path, Format::V1).unwrap();
        let mut fresh = seed_trainer(99, other(backend));
        assert_ne!(fresh.seed_hash(), first.seed_hash());
        checkpoint::restore(&mut fresh, &path).unwrap();
        assert_eq!(fresh.seed_hash(), first.seed_hash());
        assert_eq!(fresh.state().step, 0);
        assert_eq!(
            seeds_file(&fresh),
            checkpoint::encode(&first, Format::V1).unwrap()
        );
        fresh.train_until(&data, 800).unwrap();
        let want = &g["epochs"]["800"];
        assert_eq!(fresh.seed_hash(), u64_at(want, "seed_hash"));
        let digest: String = Sha256::digest(seeds_file(&fresh))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, want["v1_sha256"].as_str().unwrap());
        let mut state = fresh.state().clone();
        assert_eq!((state.epoch, state.step, state.batch), (800, 3200, 0));
        state.step = 6400;
        fresh.set_state(state).unwrap();
        assert_eq!(fresh.state_hash(), u64_at(want, "state_hash"));

        // checkpoint::load reads a v1 file as the seed model, also at step 0.
        let loaded = checkpoint::load(&path).unwrap();
        assert_eq!(loaded.config(), &TrainerConfig::seed_model());
        assert_eq!(loaded.seed_hash(), first.seed_hash());
        assert_eq!(loaded.state().step, 0);
    }
}

/// The same through a v2 file, which holds the whole state: the resumed run's full-state hash
/// is the fixture's, step counter included.
#[test]
fn resume_from_v2_equals_uninterrupted() {
    for backend in backends() {
        let g = golden();
        let data = Dataset::seed(8, 6, 4);
        let mut first = seed_trainer(1, backend);
        first.train_until(&data, 400).unwrap();
        assert_eq!(
            first.state_hash(),
            u64_at(&g["epochs"]["400"], "state_hash")
        );
        let bytes = checkpoint::encode(&first, Format::V2).unwrap();
        let file = Checkpoint::from_bytes(FileBytes::from_vec(bytes), Verify::Full).unwrap();
        let mut resumed = checkpoint::trainer_from(&file, Verify::Full).unwrap();
        resumed.set_backend(other(backend)).unwrap();
        assert_eq!(resumed.state_hash(), first.state_hash());
        resumed.train_until(&data, 800).unwrap();
        let want = &g["epochs"]["800"];
        assert_eq!(resumed.state_hash(), u64_at(want, "state_hash"));
        assert_eq!(resumed.seed_hash(), u64_at(want, "seed_hash"));
    }
}
