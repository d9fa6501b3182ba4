//! Training data: samples of binary32 features with class labels or float targets, checked once
//! when they are built.

use crate::error::{Error, Result};
use crate::loss::Target;
use crate::softf32::F32;

/// Largest data set nxrs builds, in feature cells (1 GiB of binary32): a bound on what a
/// caller's sizes can make it allocate.
pub const MAX_CELLS: usize = 1 << 28;

/// What each sample is trained towards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    /// A class index per sample (cross-entropy).
    Labels(Vec<usize>),
    /// `width` values per sample, row-major (mean squared error).
    Values { width: usize, values: Vec<F32> },
}

/// `samples` rows of `features` values (row-major) and their targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dataset {
    features: usize,
    inputs: Vec<F32>,
    targets: Targets,
}

impl Dataset {
    /// A data set from row-major features; checks that it is not empty, that the lengths
    /// agree, and that every feature and target value is finite.
    pub fn new(features: usize, inputs: Vec<F32>, targets: Targets) -> Result<Dataset> {
        let samples = match &targets {
            Targets::Labels(labels) => labels.len(),
            Targets::Values { width, values } => {
                if *width == 0 || values.len() % width != 0 {
                    return Err(Error::Input(format!(
                        "{} target values do not make rows of {width}",
                        values.len()
                    )));
                }
                values.len() / width
            }
        };
        if samples == 0 {
            return Err(Error::Input("the data set has no samples".into()));
        }
        if features == 0 || inputs.len() != samples * features {
            return Err(Error::Input(format!(
                "{} feature values do not make {samples} rows of {features}",
                inputs.len()
            )));
        }
        if let Some(k) = inputs.iter().position(|x| !is_finite(*x)) {
            return Err(Error::Input(format!(
                "feature {} of sample {} is {} (features must be finite)",
                k % features,
                k / features,
                f32::from_bits(inputs[k].to_bits())
            )));
        }
        if let Targets::Values { width, values } = &targets {
            if let Some(k) = values.iter().position(|x| !is_finite(*x)) {
                return Err(Error::Input(format!(
                    "target {} of sample {} is {} (targets must be finite)",
                    k % width,
                    k / width,
                    f32::from_bits(values[k].to_bits())
                )));
            }
        }
        Ok(Dataset {
            features,
            inputs,
            targets,
        })
    }

    /// The seed's synthetic data set: `x[s][i] = ((((s*features + i) * 3) % 7) - 3) / 4` and
    /// label `(s*3) % classes`. The seed uses 8 samples, 6 features, 4 classes (its samples 0 and
    /// 7 have equal features and different labels: at most 7 of 8 can be classified correctly).
    pub fn seed(samples: usize, features: usize, classes: usize) -> Result<Dataset> {
        let cells = samples.checked_mul(features).filter(|&c| c <= MAX_CELLS);
        let Some(cells) = cells.filter(|_| samples > 0 && features > 0 && classes > 0) else {
            return Err(Error::Input(format!(
                "samples = {samples}, features = {features}, classes = {classes}: each must be \
                 at least 1, with samples * features at most {MAX_CELLS}"
            )));
        };
        let four = F32::from_i32(4);
        let inputs = (0..cells)
            .map(|k| F32::from_i64(((k as i64 * 3) % 7) - 3) / four)
            .collect();
        let labels = (0..samples).map(|s| (s * 3) % classes).collect();
        Dataset::new(features, inputs, Targets::Labels(labels))
    }

    pub fn len(&self) -> usize {
        match &self.targets {
            Targets::Labels(labels) => labels.len(),
            Targets::Values { width, values } => values.len() / width,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn features(&self) -> usize {
        self.features
    }

    pub fn inputs(&self) -> &[F32] {
        &self.inputs
    }

    pub fn targets(&self) -> &Targets {
        &self.targets
    }

    /// Sample `s`: its features and target.
    pub fn sample(&self, s: usize) -> (&[F32], Target<'_, F32>) {
        let row = &self.inputs[s * self.features..(s + 1) * self.features];
        let target = match &self.targets {
            Targets::Labels(labels) => Target::Class(labels[s]),
            Targets::Values { width, values } => {
                Target::Values(&values[s * width..(s + 1) * width])
            }
        };
        (row, target)
    }
}

fn is_finite(x: F32) -> bool {
    !(x.is_nan() || x.is_infinite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_empty_ragged_and_non_finite_data() {
        let labels = |n| Targets::Labels(vec![0; n]);
        assert!(Dataset::new(2, vec![], labels(0)).is_err());
        assert!(Dataset::new(2, vec![F32::ZERO; 3], labels(2)).is_err());
        assert!(Dataset::new(0, vec![], labels(1)).is_err());
        assert!(Dataset::new(1, vec![F32::INFINITY], labels(1)).is_err());
        assert!(Dataset::new(1, vec![F32::DEFAULT_NAN], labels(1)).is_err());
        let nan_target = Targets::Values {
            width: 1,
            values: vec![F32::DEFAULT_NAN],
        };
        assert!(Dataset::new(1, vec![F32::ZERO], nan_target).is_err());
        assert!(Dataset::new(1, vec![F32::ZERO], labels(1)).is_ok());
    }

    #[test]
    fn seed_data_is_bounded() {
        assert!(Dataset::seed(1 << 20, 1 << 20, 4).is_err());
        assert!(Dataset::seed(usize::MAX, 2, 4).is_err());
        assert!(Dataset::seed(8, 6, 0).is_err());
        assert_eq!(Dataset::seed(8, 6, 4).unwrap().len(), 8);
    }
}
