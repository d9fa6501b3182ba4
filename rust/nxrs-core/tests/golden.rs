//! The Rust core against the golden fixture made by the independent numpy reference
//! (`tests/golden/seed.json`, from `tests/reference/seed_ref.py`): the same numbers pytest checks
//! through the Python package, so the core and the package agree on them.

use nxrs_core::dataset::Dataset;
use nxrs_core::nxck::v1;
use nxrs_core::{Trainer, TrainerConfig};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn golden() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/golden/seed.json");
    let text = std::fs::read_to_string(path).expect("tests/golden/seed.json is in the repository");
    serde_json::from_str(&text).expect("valid JSON")
}

fn u64_at(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a u64"))
}

fn seed_trainer(seed: i64) -> Trainer {
    Trainer::new(&TrainerConfig::seed_model(), seed).unwrap()
}

#[test]
fn init_hashes() {
    let g = golden();
    for (seed, key) in [(1, "init"), (99, "fresh_init")] {
        let t = seed_trainer(seed);
        assert_eq!(t.seed_hash(), u64_at(&g[key], "seed_hash"), "{key}");
        assert_eq!(t.state_hash(), u64_at(&g[key], "state_hash"), "{key}");
    }
}

#[test]
fn first_step() {
    let g = &golden()["first_step"];
    let data = Dataset::seed(8, 6, 4);
    let mut t = seed_trainer(1);
    let (x, y) = data.sample(0);
    t.step(x, y).unwrap();
    let bits = |k: usize| -> Vec<u64> {
        t.state().params[k]
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
    assert_eq!(bits(2), want("W2_bits"));
    assert_eq!(t.state_hash(), u64_at(g, "state_hash"));
}

#[test]
fn epochs_and_v1_bytes() {
    let g = golden();
    let data = Dataset::seed(8, 6, 4);
    let mut t = seed_trainer(1);
    for epoch in ["1", "400", "800"] {
        let want = &g["epochs"][epoch];
        t.train_until(&data, epoch.parse().unwrap()).unwrap();
        assert_eq!(t.seed_hash(), u64_at(want, "seed_hash"), "epoch {epoch}");
        assert_eq!(t.state_hash(), u64_at(want, "state_hash"), "epoch {epoch}");
        let s = t.state();
        assert_eq!(u64::from(s.b1t.to_bits()), u64_at(want, "b1t_bits"));
        assert_eq!(u64::from(s.b2t.to_bits()), u64_at(want, "b2t_bits"));
        let bytes = v1::encode(s);
        assert_eq!(bytes.len() as u64, u64_at(want, "v1_len"));
        let digest: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, want["v1_sha256"].as_str().unwrap(), "epoch {epoch}");
    }
}

#[test]
fn resume_from_v1_in_a_fresh_trainer_equals_uninterrupted() {
    let g = golden();
    let data = Dataset::seed(8, 6, 4);
    let mut first = seed_trainer(1);
    first.train_until(&data, 400).unwrap();
    let mut fresh = seed_trainer(99);
    let restored = v1::decode(&v1::encode(first.state()), fresh.state()).unwrap();
    fresh.set_state(restored).unwrap();
    fresh.train_until(&data, 800).unwrap();
    assert_eq!(fresh.seed_hash(), u64_at(&g["epochs"]["800"], "seed_hash"));
    assert_eq!(
        fresh.state_hash(),
        u64_at(&g["epochs"]["800"], "state_hash")
    );
}
