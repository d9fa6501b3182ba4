//! Training data: samples of binary32 features with integer class labels.

use crate::error::{Error, Result};
use crate::softf32::F32;

/// `samples` rows of `features` values (row-major) and one label per row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dataset {
    features: usize,
    inputs: Vec<F32>,
    labels: Vec<usize>,
}

impl Dataset {
    /// A dataset from row-major features; checks that the lengths agree.
    pub fn new(features: usize, inputs: Vec<F32>, labels: Vec<usize>) -> Result<Dataset> {
        if features == 0 || inputs.len() != labels.len() * features {
            return Err(Error::Input(format!(
                "{} feature values do not make {} rows of {features}",
                inputs.len(),
                labels.len()
            )));
        }
        Ok(Dataset {
            features,
            inputs,
            labels,
        })
    }

    /// The seed's synthetic dataset: `x[s][i] = ((((s*features + i) * 3) % 7) - 3) / 4` and
    /// label `(s*3) % classes`. The seed uses 8 samples, 6 features, 4 classes (its samples 0 and 7
    /// have equal features and different labels: at most 7 of 8 can be classified correctly).
    pub fn seed(samples: usize, features: usize, classes: usize) -> Dataset {
        let four = F32::from_i32(4);
        let inputs = (0..samples * features)
            .map(|k| F32::from_i64(((k as i64 * 3) % 7) - 3) / four)
            .collect();
        let labels = (0..samples).map(|s| (s * 3) % classes).collect();
        Dataset {
            features,
            inputs,
            labels,
        }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn features(&self) -> usize {
        self.features
    }

    /// Sample `s`: its features and label.
    pub fn sample(&self, s: usize) -> (&[F32], usize) {
        let row = &self.inputs[s * self.features..(s + 1) * self.features];
        (row, self.labels[s])
    }

    pub fn inputs(&self) -> &[F32] {
        &self.inputs
    }

    pub fn labels(&self) -> &[usize] {
        &self.labels
    }
}
