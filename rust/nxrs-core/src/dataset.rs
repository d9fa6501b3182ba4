//! Training data: samples of binary32 features with integer class labels or float targets.
//!
//! [`Dataset::new`] (labels) and [`Dataset::regression`] (targets) are the one check of data
//! given by users (sizes, finiteness, labels); a single sample for a step goes through them too.

use crate::cell_bytes::write_cells;
use crate::error::{Error, Result};
use crate::fnv::Fnv1a64;
use crate::loss::Target;
use crate::softf32::F32;
use crate::Integer;

/// Most feature cells (samples × features) one dataset may hold: 2^28, 1 GiB of binary32, the
/// same bound as the model's parameters. It bounds what a request such as
/// `seed_dataset(10**6, 10**6, 4)` can make nxrs allocate, and keeps `samples * features` far
/// from overflowing.
pub const MAX_CELLS: usize = 1 << 28;

/// What each sample is trained towards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    /// `per_sample` class indices per sample (one, or a sequence model's one per token), each
    /// in `0..classes` (cross-entropy).
    Labels {
        classes: usize,
        labels: Vec<usize>,
        per_sample: usize,
    },
    /// `width` finite values per sample, row-major (mean squared error).
    Values { width: usize, values: Vec<F32> },
}

/// `samples` rows of `features` values (row-major) and their targets. Never empty, every
/// feature finite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dataset {
    features: usize,
    inputs: Vec<F32>,
    targets: Targets,
    /// A token stream (section 15.8): sample `s` is the window of `features` tokens starting
    /// at token `s`, its labels the window one token on. `inputs` holds the stream's ids, and
    /// `targets` their labels (the same ids).
    stream: bool,
}

/// Why label `y` of sample `s` is not one of the `classes` (the model's outputs, one per class):
/// negative, or beyond them, saying how many outputs the labels would need.
fn label_outside<T: Integer>(s: usize, y: T, classes: usize, labels: &[T]) -> String {
    let outside = format!(
        "label {y} of sample {s} is outside 0..{classes}, the classes of a model with {classes} \
         outputs (one per class)"
    );
    if y.to_string().starts_with('-') {
        return format!("{outside}: a label is a class index, from 0");
    }
    let largest = labels.iter().filter_map(|&y| y.try_into().ok()).max();
    match largest.and_then(|largest: usize| largest.checked_add(1)) {
        Some(needed) if y.try_into().is_ok() => format!(
            "{outside}: these labels go up to {} ({needed} classes), so the model needs \
             {needed} outputs (its last layer's size)",
            needed - 1
        ),
        _ => outside,
    }
}

impl Dataset {
    /// A dataset from row-major features and one label per row. Refuses (`Error::Input`) an empty
    /// dataset, more than [`MAX_CELLS`] cells, lengths that do not agree, a NaN or infinite
    /// feature (it would make every weight NaN at the first step), and a label outside
    /// `0..classes`. Labels may be of any integer type and are checked exactly.
    pub fn new<T: Integer>(
        features: usize,
        classes: usize,
        inputs: Vec<F32>,
        labels: &[T],
    ) -> Result<Dataset> {
        Dataset::with_labels(features, classes, inputs, labels, 1)
    }

    /// [`Dataset::new`] with `per_sample` labels per sample, in sample order (a sequence
    /// model's label per token, section 15.8); a label outside the classes is named by its
    /// sample and position.
    pub fn with_labels<T: Integer>(
        features: usize,
        classes: usize,
        inputs: Vec<F32>,
        labels: &[T],
        per_sample: usize,
    ) -> Result<Dataset> {
        if per_sample == 0 || !labels.len().is_multiple_of(per_sample) {
            return Err(Error::Input(format!(
                "{} labels are not rows of {per_sample}, one per token",
                labels.len()
            )));
        }
        let samples = labels.len() / per_sample;
        let features = check_inputs(samples, features, &inputs, "row of labels")?;
        let labels = labels
            .iter()
            .enumerate()
            .map(|(k, &y)| {
                y.try_into()
                    .ok()
                    .filter(|&label| label < classes)
                    .ok_or_else(|| {
                        let outside = label_outside(k / per_sample, y, classes, labels);
                        Error::Input(match per_sample {
                            1 => outside,
                            _ => format!("{outside} (at position {})", k % per_sample),
                        })
                    })
            })
            .collect::<Result<_>>()?;
        Ok(Dataset {
            features,
            inputs,
            targets: Targets::Labels {
                classes,
                labels,
                per_sample,
            },
            stream: false,
        })
    }

    /// A dataset from row-major features and `width` target values per row (regression). Refuses
    /// what [`Dataset::new`] refuses, targets that do not make whole rows, and non-finite ones.
    pub fn regression(
        features: usize,
        inputs: Vec<F32>,
        width: usize,
        values: Vec<F32>,
    ) -> Result<Dataset> {
        if width == 0 || !values.len().is_multiple_of(width) {
            return Err(Error::Input(format!(
                "{} target values are not rows of {width}",
                values.len()
            )));
        }
        let features = check_inputs(values.len() / width, features, &inputs, "row of targets")?;
        if let Some(k) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::Input(format!(
                "target {} of sample {} is {}: targets must be finite",
                k % width,
                k / width,
                f32::from_bits(values[k].to_bits())
            )));
        }
        Ok(Dataset {
            features,
            inputs,
            targets: Targets::Values { width, values },
            stream: false,
        })
    }

    /// A token stream of `tokens` (ids in `0..classes`, checked) read as windows of `window`
    /// tokens (section 15.8): sample `s` is tokens `s .. s + window`, labelled by tokens
    /// `s + 1 .. s + window + 1`, for `s` in `0 .. len - window`. Refuses (`Error::Input`) a
    /// stream of at most `window` tokens (no window has a next token for its last) and more
    /// than [`MAX_CELLS`] tokens.
    pub fn token_stream<T: Integer>(
        tokens: &[T],
        window: usize,
        classes: usize,
    ) -> Result<Dataset> {
        if window == 0 || tokens.len() <= window {
            return Err(Error::Input(format!(
                "a token stream of {} tokens has no window of {window} tokens and its next \
                 token: it needs at least {} (the model's context + 1)",
                tokens.len(),
                window.saturating_add(1)
            )));
        }
        if tokens.len() > MAX_CELLS {
            return Err(Error::Input(format!(
                "a token stream of {} tokens is longer than the limit {MAX_CELLS} (2^28)",
                tokens.len()
            )));
        }
        let labels: Vec<usize> = tokens
            .iter()
            .enumerate()
            .map(|(k, &id)| {
                id.try_into()
                    .ok()
                    .filter(|&id| id < classes)
                    .ok_or_else(|| {
                        Error::Input(format!(
                            "token {k} of the stream is {id}: a token id is an integer in \
                         0..{classes} (the model's vocabulary)"
                        ))
                    })
            })
            .collect::<Result<_>>()?;
        let inputs = labels.iter().map(|&id| F32::from_i64(id as i64)).collect();
        Ok(Dataset {
            features: window,
            inputs,
            targets: Targets::Labels {
                classes,
                labels,
                per_sample: window,
            },
            stream: true,
        })
    }

    /// Whether this is a token stream ([`Dataset::token_stream`]).
    pub fn is_stream(&self) -> bool {
        self.stream
    }

    /// The samples at `positions` (indices of this data set's samples) as a data set of their
    /// own, rows in that order: a token stream's windows copied out.
    pub fn samples_at(&self, positions: &[usize]) -> Dataset {
        let inputs = positions
            .iter()
            .flat_map(|&s| self.sample(s).0.iter().copied())
            .collect();
        let targets = match &self.targets {
            Targets::Labels {
                classes,
                per_sample,
                ..
            } => Targets::Labels {
                classes: *classes,
                per_sample: *per_sample,
                labels: positions
                    .iter()
                    .flat_map(|&s| match self.sample(s).1 {
                        Target::Class(label) => vec![label],
                        Target::Classes(labels) => labels.to_vec(),
                        Target::Values(_) => unreachable!("labels give classes"),
                    })
                    .collect(),
            },
            Targets::Values { width, .. } => Targets::Values {
                width: *width,
                values: positions
                    .iter()
                    .flat_map(|&s| match self.sample(s).1 {
                        Target::Values(values) => values.to_vec(),
                        _ => unreachable!("targets give values"),
                    })
                    .collect(),
            },
        };
        Dataset {
            features: self.features,
            inputs,
            targets,
            stream: false,
        }
    }

    /// The seed's synthetic dataset: `x[s][i] = ((((s*features + i) * 3) % 7) - 3) / 4` and
    /// label `(s*3) % classes`. The seed uses 8 samples, 6 features, 4 classes (its samples 0 and 7
    /// have equal features and different labels: at most 7 of 8 can be classified correctly).
    /// Sizes as in [`Dataset::new`]; `classes` at least 1 (`Error::Input` otherwise).
    pub fn try_seed<T: Integer>(samples: T, features: T, classes: T) -> Result<Dataset> {
        let (samples, features) = check_size(samples, features)?;
        let classes = classes
            .try_into()
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| Error::Input(format!("classes = {classes} is not at least 1")))?;
        let four = F32::from_i32(4);
        // No overflow: k < MAX_CELLS and s < MAX_CELLS, far below 2^63 / 3.
        let inputs = (0..samples * features)
            .map(|k| F32::from_i64(((k as i64 * 3) % 7) - 3) / four)
            .collect();
        let labels = (0..samples).map(|s| (s * 3) % classes).collect();
        Ok(Dataset {
            features,
            inputs,
            targets: Targets::Labels {
                classes,
                labels,
                per_sample: 1,
            },
            stream: false,
        })
    }

    /// [`Dataset::try_seed`] for sizes known to be valid (the seed's own 8, 6, 4 in tests).
    ///
    /// # Panics
    /// On sizes `try_seed` refuses.
    pub fn seed(samples: usize, features: usize, classes: usize) -> Dataset {
        Dataset::try_seed(samples, features, classes).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Number of samples, at least 1 (a token stream's: its windows).
    pub fn len(&self) -> usize {
        match self.stream {
            true => self.inputs.len() - self.features,
            false => self.inputs.len() / self.features,
        }
    }

    /// Always false: a dataset has at least one sample (kept beside `len`, as Rust convention
    /// asks).
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    pub fn features(&self) -> usize {
        self.features
    }

    pub fn targets(&self) -> &Targets {
        &self.targets
    }

    /// Sample `s`: its features and target.
    pub fn sample(&self, s: usize) -> (&[F32], Target<'_, F32>) {
        if self.stream {
            let (n, Targets::Labels { labels, .. }) = (self.features, &self.targets) else {
                unreachable!("a token stream has labels")
            };
            return (
                &self.inputs[s..s + n],
                Target::Classes(&labels[s + 1..s + n + 1]),
            );
        }
        let row = &self.inputs[s * self.features..(s + 1) * self.features];
        let target = match &self.targets {
            Targets::Labels {
                labels, per_sample, ..
            } => match per_sample {
                1 => Target::Class(labels[s]),
                n => Target::Classes(&labels[s * n..(s + 1) * n]),
            },
            Targets::Values { width, values } => {
                Target::Values(&values[s * width..(s + 1) * width])
            }
        };
        (row, target)
    }

    pub fn inputs(&self) -> &[F32] {
        &self.inputs
    }

    /// The data's canonical encoding, written in pieces to `write`: little-endian `u64`
    /// samples, `u64` features, every feature's `u32` bits, then for labels a 0 byte, `u64`
    /// classes and each label as `u64` (labels per token: a 2 byte, `u64` classes, `u64` labels per
    /// sample, each label), or for targets a 1 byte, `u64` width and each value's
    /// `u32` bits. Equal data (same bits, shapes and order) and only equal data encode alike:
    /// the fingerprint and the data digest (`docs/TRAINING.md` section 16) hash it. (A token
    /// stream writes its own form, starting with a `u64` 0 and a 3 byte.)
    pub fn encode(&self, write: &mut dyn FnMut(&[u8])) {
        let word = |write: &mut dyn FnMut(&[u8]), n: usize| write(&(n as u64).to_le_bytes());
        if let (true, Targets::Labels { classes, .. }) = (self.stream, &self.targets) {
            // A token stream: `u64` 0 (no other data set has 0 samples), a 3 byte, `u64`
            // tokens, `u64` window, `u64` classes, the ids' bits (its labels are the ids).
            word(write, 0);
            write(&[3]);
            word(write, self.inputs.len());
            word(write, self.features);
            word(write, *classes);
            write_cells(&self.inputs, write);
            return;
        }
        word(write, self.len());
        word(write, self.features);
        write_cells(&self.inputs, write);
        match &self.targets {
            // One label per sample as before labels per token existed (tag 0, so that such
            // data keeps its digest); labels per token under their own tag, with their count.
            Targets::Labels {
                classes,
                labels,
                per_sample: 1,
            } => {
                write(&[0]);
                word(write, *classes);
                labels.iter().for_each(|&y| word(write, y));
            }
            Targets::Labels {
                classes,
                labels,
                per_sample,
            } => {
                write(&[2]);
                word(write, *classes);
                word(write, *per_sample);
                labels.iter().for_each(|&y| word(write, y));
            }
            Targets::Values { width, values } => {
                write(&[1]);
                word(write, *width);
                write_cells(values, write);
            }
        }
    }

    /// A 64-bit fingerprint of the data: FNV-1a over [`Dataset::encode`]'s bytes. A
    /// checkpoint written by `fit` records it so that resuming on other data is noticed.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv1a64::new();
        self.encode(&mut |bytes| h.write(bytes));
        h.finish()
    }
}

/// Checks the size (see [`check_size`]) and that `inputs` are `samples` rows of `features`
/// finite values, `samples` being the number of targets (each a `target`). Returns `features`.
fn check_inputs(samples: usize, features: usize, inputs: &[F32], target: &str) -> Result<usize> {
    let (samples, features) = check_size(samples, features)?;
    if inputs.len() != samples * features {
        return Err(Error::Input(format!(
            "{} feature values are not {samples} samples (one per {target}) of {features} features",
            inputs.len()
        )));
    }
    if let Some(k) = inputs.iter().position(|v| !v.is_finite()) {
        return Err(Error::Input(format!(
            "feature {} of sample {} is {}: features must be finite",
            k % features,
            k / features,
            f32::from_bits(inputs[k].to_bits())
        )));
    }
    Ok(features)
}

/// The one check of a dataset's size: at least one sample of at least one feature, and at most
/// [`MAX_CELLS`] cells. Returns `(samples, features)`.
fn check_size<S: Integer, F: Integer>(samples: S, features: F) -> Result<(usize, usize)> {
    let positive = |n: Option<usize>| n.filter(|&n| (1..=MAX_CELLS).contains(&n));
    let (Some(s), Some(f)) = (
        positive(samples.try_into().ok()),
        positive(features.try_into().ok()),
    ) else {
        return Err(Error::Input(format!(
            "{samples} samples of {features} features: a dataset needs at least one sample \
             of at least one feature, and at most {MAX_CELLS} (2^28) feature values"
        )));
    };
    let cells = s as u64 * f as u64; // both at most 2^28: no overflow, even on 32-bit targets
    if cells > MAX_CELLS as u64 {
        return Err(Error::Input(format!(
            "{s} samples of {f} features are {cells} feature values, more than the limit \
             {MAX_CELLS} (2^28)"
        )));
    }
    Ok((s, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input_error<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(Error::Input(message)) => message,
            other => panic!("expected Error::Input, got {other:?}"),
        }
    }

    #[test]
    fn seed_sizes_are_bounded() {
        // 10^6 * 10^6 cells would need 4 TB: refused before allocating.
        let message = input_error(Dataset::try_seed(1_000_000, 1_000_000, 4));
        assert!(message.contains("268435456"), "{message}");
        input_error(Dataset::try_seed(i64::MIN, 2, 4));
        input_error(Dataset::try_seed(-1, 6, 4));
        input_error(Dataset::try_seed(0, 6, 4));
        input_error(Dataset::try_seed(8, 0, 4));
        input_error(Dataset::try_seed(8, 6, 0));
        input_error(Dataset::try_seed(u64::MAX, 2, 4));
        // The limit itself is accepted: 2^28 cells (checked without allocating 1 GiB).
        assert_eq!(check_size(1 << 14, 1 << 14).unwrap(), (1 << 14, 1 << 14));
        assert_eq!(check_size(1, MAX_CELLS).unwrap(), (1, MAX_CELLS));
        input_error(check_size((1 << 14) + 1, 1 << 14));
        input_error(check_size(1, MAX_CELLS + 1));
    }

    #[test]
    fn new_checks_its_data() {
        let cells = |n: usize| vec![F32::ONE; n];
        assert_eq!(Dataset::new(3, 2, cells(6), &[0, 1]).unwrap().len(), 2);
        input_error(Dataset::new::<i64>(3, 2, cells(0), &[])); // empty
        input_error(Dataset::new(3, 2, cells(5), &[0, 1])); // lengths disagree
        input_error(Dataset::new(0, 2, cells(0), &[0])); // no features
        let message = input_error(Dataset::new(3, 2, cells(6), &[0, -1]));
        assert!(message.contains("label -1 of sample 1"), "{message}");
        input_error(Dataset::new(3, 2, cells(6), &[2, 0]));
        input_error(Dataset::new(3, 2, cells(6), &[0, u64::MAX]));
        for bad in [F32::INFINITY, F32::NEG_INFINITY, F32::DEFAULT_NAN] {
            let mut inputs = cells(6);
            inputs[4] = bad;
            let message = input_error(Dataset::new(3, 2, inputs, &[0, 1]));
            assert!(message.contains("feature 1 of sample 1"), "{message}");
        }
    }

    #[test]
    fn fingerprints_see_every_bit_shape_and_kind() {
        let base = Dataset::new(2, 3, vec![F32::ONE; 4], &[0, 1]).unwrap();
        let same = Dataset::new(2, 3, vec![F32::ONE; 4], &[0, 1]).unwrap();
        assert_eq!(base.fingerprint(), same.fingerprint());
        let others = [
            Dataset::new(2, 3, vec![F32::ONE; 4], &[1, 0]).unwrap(),
            Dataset::new(1, 3, vec![F32::ONE; 4], &[0, 1, 0, 0]).unwrap(),
            Dataset::new(2, 2, vec![F32::ONE; 4], &[0, 1]).unwrap(),
            Dataset::new(
                2,
                3,
                vec![F32::ONE, F32::ONE, F32::ONE, F32::NEG_ZERO],
                &[0, 1],
            )
            .unwrap(),
            Dataset::regression(2, vec![F32::ONE; 4], 1, vec![F32::ZERO, F32::ONE]).unwrap(),
        ];
        for other in others {
            assert_ne!(base.fingerprint(), other.fingerprint(), "{other:?}");
        }
    }

    #[test]
    fn regression_checks_its_targets() {
        let cells = |n: usize| vec![F32::ONE; n];
        assert_eq!(
            Dataset::regression(3, cells(6), 2, cells(4)).unwrap().len(),
            2
        );
        input_error(Dataset::regression(3, cells(6), 2, cells(3))); // ragged targets
        input_error(Dataset::regression(3, cells(6), 0, cells(0))); // no target width
        input_error(Dataset::regression(3, cells(6), 1, cells(3))); // 3 targets, 2 rows
        let mut values = cells(4);
        values[3] = F32::DEFAULT_NAN;
        let message = input_error(Dataset::regression(3, cells(6), 2, values));
        assert!(message.contains("target 1 of sample 1"), "{message}");
    }
}
