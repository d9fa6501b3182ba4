//! The random streams of a training run (`docs/TRAINING.md`, section 9): SplitMix64 generators
//! keyed by `(seed, domain, index)`, unbiased bounded integers, and Fisher–Yates permutations.
//!
//! Written out here rather than taken from a crate because every draw is part of the definition
//! of a run: the stream must never change with a dependency's version, and the numpy reference
//! implements the same few lines independently.

/// What a stream is for. Keying each use by its own domain keeps, say, the shuffle of epoch 0
/// and the initialisation of layer 0 independent even though both have index 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Domain {
    /// Weight initialisation; the index is the layer.
    Init = 0x696E_6974,
    /// The sample order of an epoch; the index is the epoch.
    Shuffle = 0x7368_7566,
    /// The train/test split of a data set; the index is 0.
    Split = 0x7370_6C74,
    /// Dropout masks; the index is the step (section 15.5 hashes the rest in).
    Dropout = 0x6472_6F70,
    /// The windows of a token stream a step trains on; the index is the step (section 15.8).
    Window = 0x7769_6E64,
    /// The windows a token stream's loss is estimated on; the index is the part (0 the
    /// training stream, 1 the validation stream).
    Evaluate = 0x6576_616C,
    /// A generated token's draw; the index is the token's number in the generation.
    Sample = 0x7361_6D70,
}

/// SplitMix64's increment (2^64 divided by the golden ratio, made odd).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser (Stafford's "Mix13"): a bijection of `u64` that spreads every input
/// bit over every output bit.
pub fn mix64(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A SplitMix64 generator.
#[derive(Clone, Debug)]
pub struct Stream {
    state: u64,
}

impl Stream {
    /// The stream `(seed, domain, index)`: initial state
    /// `mix64(mix64(mix64(seed as u64) ^ domain) ^ index)`. Each step is a bijection, so
    /// distinct keys that differ in one component give distinct streams.
    pub fn new(seed: i64, domain: Domain, index: u64) -> Stream {
        let seed_bits = seed as u64; // two's complement, by definition
        Stream {
            state: mix64(mix64(mix64(seed_bits) ^ domain as u64) ^ index),
        }
    }

    /// A generator starting from a raw SplitMix64 state (for checking against published
    /// SplitMix64 output).
    pub fn from_state(state: u64) -> Stream {
        Stream { state }
    }

    /// The initial state, as a key to hash more coordinates into (dropout masks, which need
    /// random access by sample and cell rather than a sequence of draws).
    pub fn key(&self) -> u64 {
        self.state
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }

    /// A uniform integer in `0..n` (`n >= 1`), by Lemire's multiply-and-reject: the high half of
    /// `x * n` is uniform once the draws whose low half falls in the short first interval
    /// (`(2^64 - n) mod n` values) are rejected. The threshold is only computed in the rare case
    /// that the low half is below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n >= 1, "below(0) has no value to return");
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n; // (2^64 - n) mod n
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }

    /// The Fisher–Yates permutation of `0..n`: for `i = n-1` down to 1, swap item `i` with item
    /// `below(i + 1)`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut items: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_its_reference_output() {
        // The first outputs of Vigna's splitmix64.c seeded with 0, as published with it (and
        // reproduced by every port, e.g. Java's SplittableRandom(0).nextLong()).
        let mut s = Stream::from_state(0);
        assert_eq!(s.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(s.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(s.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn below_stays_in_range_and_covers_it_evenly() {
        let mut s = Stream::new(7, Domain::Shuffle, 0);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[s.below(6) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn permutations_are_permutations_and_depend_on_the_key() {
        let p = Stream::new(1, Domain::Shuffle, 0).permutation(100);
        let mut sorted = p.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_ne!(p, Stream::new(1, Domain::Shuffle, 1).permutation(100));
        assert_ne!(p, Stream::new(2, Domain::Shuffle, 0).permutation(100));
        assert_ne!(p, Stream::new(1, Domain::Init, 0).permutation(100));
        assert_eq!(Stream::new(1, Domain::Shuffle, 0).permutation(1), vec![0]);
        assert!(Stream::new(1, Domain::Shuffle, 0).permutation(0).is_empty());
    }
}
