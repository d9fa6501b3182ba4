//! The shapes of data a model takes (`x` and `y` of a training step, an evaluation or an
//! inference): how many dimensions each may have, how a sample's shape must match the model's
//! input (its shape, or its cells flat), and how many targets a sample has. The bindings read
//! arrays by these rules; the values are the data set's to check (`dataset`).

use crate::error::{Error, Result};
use crate::model::Model;

/// What an `(x, y)` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// One sample: its features; a label, or its targets (0-D for one output, else 1-D).
    One,
    /// Samples, first dimension: features; 1-D labels, or 2-D targets (1-D for one output).
    Many,
}

impl Rows {
    /// The leading dimensions before a sample's own (0 for one sample, 1 for a batch).
    pub fn rank(self) -> usize {
        match self {
            Rows::One => 0,
            Rows::Many => 1,
        }
    }

    /// The accepted numbers of dimensions of features for `model`: the leading ones and the
    /// features flat, or also (a model whose input has a shape) the input's shape.
    pub fn feature_ndims(self, model: &Model) -> Vec<usize> {
        let (rank, input) = (self.rank(), model.input_shape().len());
        if input > 1 {
            vec![rank + 1, rank + input]
        } else {
            vec![rank + 1]
        }
    }

    /// The features per sample of features shaped `shape` (of one of
    /// [`Rows::feature_ndims`]): a sample with more than one dimension must have the model's
    /// input shape (`Error::Input`).
    pub fn features_per_sample(self, model: &Model, shape: &[usize]) -> Result<usize> {
        let sample = &shape[self.rank().min(shape.len())..];
        let input = model.input_shape();
        if sample.len() > 1 && sample != input {
            return Err(Error::Input(format!(
                "samples have shape {sample:?}, the model takes {input:?} (or their {} cells flat)",
                input.iter().product::<usize>()
            )));
        }
        Ok(sample.iter().product())
    }

    /// The number of dimensions of labels: the leading ones, and a sequence model's tokens
    /// (section 15.8).
    pub fn label_ndim(self, model: &Model) -> usize {
        self.rank() + usize::from(model.per_token())
    }

    /// The accepted numbers of dimensions of regression targets for `model`: the leading ones
    /// and the outputs, or the leading ones alone for a model of one output.
    pub fn target_ndims(self, model: &Model) -> Vec<usize> {
        let rank = self.rank();
        if model.outputs() == 1 {
            vec![rank, rank + 1]
        } else {
            vec![rank + 1]
        }
    }

    /// The targets per sample of targets shaped `shape` (of one of [`Rows::target_ndims`]):
    /// one when they lack the outputs' dimension.
    pub fn targets_per_sample(self, shape: &[usize]) -> usize {
        shape.get(self.rank()).copied().unwrap_or(1)
    }
}

/// Checks that inference's samples have `features` features each, as `model` takes.
pub fn check_inference_features(model: &Model, features: usize) -> Result<()> {
    let inputs = model.inputs();
    if features != inputs {
        return Err(Error::Input(format!(
            "samples have {features} features, the model takes {inputs}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::LayerSpec;
    use crate::model::Architecture;

    /// The message of an `Error::Input`.
    fn refused<T: std::fmt::Debug>(result: Result<T>) -> String {
        match result {
            Err(Error::Input(message)) => message,
            other => panic!("not an input error: {other:?}"),
        }
    }

    fn image_model() -> Model {
        let specs: Vec<LayerSpec> = [
            r#"{"type": "Input", "shape": [1, 4, 4]}"#,
            r#"{"type": "Flatten"}"#,
            r#"{"type": "Dense", "units": 1}"#,
        ]
        .iter()
        .enumerate()
        .map(|(i, text)| LayerSpec::from_json_text(text, i).unwrap())
        .collect();
        Model::new(&Architecture::Layers(specs)).unwrap()
    }

    #[test]
    fn features_are_flat_or_the_inputs_shape() {
        let mlp = Model::new(&Architecture::Sizes(vec![6, 3])).unwrap();
        assert_eq!(Rows::Many.feature_ndims(&mlp), vec![2]);
        assert_eq!(Rows::One.feature_ndims(&mlp), vec![1]);
        let image = image_model();
        assert_eq!(Rows::Many.feature_ndims(&image), vec![2, 4]);
        assert_eq!(Rows::One.feature_ndims(&image), vec![1, 3]);
        assert_eq!(
            Rows::Many.features_per_sample(&image, &[5, 16]).unwrap(),
            16
        );
        assert_eq!(
            Rows::Many
                .features_per_sample(&image, &[5, 1, 4, 4])
                .unwrap(),
            16
        );
        assert_eq!(
            refused(Rows::Many.features_per_sample(&image, &[5, 1, 2, 8])),
            "samples have shape [1, 2, 8], the model takes [1, 4, 4] (or their 16 cells flat)"
        );
    }

    #[test]
    fn targets_may_lack_a_single_outputs_dimension() {
        let mlp = Model::new(&Architecture::Sizes(vec![6, 3])).unwrap();
        assert_eq!(Rows::Many.target_ndims(&mlp), vec![2]);
        assert_eq!(Rows::Many.target_ndims(&image_model()), vec![1, 2]);
        assert_eq!(Rows::One.target_ndims(&image_model()), vec![0, 1]);
        assert_eq!(Rows::Many.targets_per_sample(&[5]), 1);
        assert_eq!(Rows::Many.targets_per_sample(&[5, 3]), 3);
        assert_eq!(Rows::One.targets_per_sample(&[3]), 3);
        assert_eq!(Rows::Many.label_ndim(&mlp), 1);
        assert_eq!(
            refused(check_inference_features(&mlp, 5)),
            "samples have 5 features, the model takes 6"
        );
        assert!(check_inference_features(&mlp, 6).is_ok());
    }
}
