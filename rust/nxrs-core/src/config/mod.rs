//! A trainer's configuration (`docs/TRAINING.md`, section 1): everything that, with the data,
//! determines every bit of a run. Its settings are defined once, in the table of [`schema`]:
//! building a configuration from named values, reading a setting back, comparing two
//! configurations and the validation all go through it, for every way a trainer is built.
//! `record.rs` holds its form in a checkpoint ([`TrainerConfig::to_json`]).

mod record;
pub mod schema;

pub use schema::{setting, settings, Setting, Type, Value};

use crate::error::{clip, Error, Result};
use crate::init::Init;
use crate::loss::Loss;
use crate::math::Math;
use crate::model::{Architecture, Model};
use crate::optim::{DecayParams, Kind, OptimizerConfig};
use crate::schedule::Schedule;
use crate::softf32::F32;

/// What a [`crate::Trainer`] is built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainerConfig {
    pub architecture: Architecture,
    pub loss: Loss,
    pub math: Math,
    pub init: Init,
    /// Keys the initialisation and the shuffle.
    pub seed: i64,
    pub optimizer: OptimizerConfig,
    pub schedule: Schedule,
    /// Clip the gradient's global norm to this value.
    pub clip_norm: Option<F32>,
    pub batch_size: usize,
    /// Consecutive samples whose gradients are summed before the block sums are added (the
    /// whole batch when `None`).
    pub grad_block: Option<usize>,
    pub shuffle: bool,
    /// Skip an epoch's last batch when it is shorter than `batch_size`.
    pub drop_last: bool,
}

crate::names::names! {
    /// The two families of configurations, each with its own defaults (the schema's columns):
    /// the general trainer (`docs/TRAINING.md`'s defaults) and the seed program's model.
    pub enum Family {
        General = "general",
        SeedModel = "seed_model",
    }
}

impl Family {
    /// The keyword that gives this family's layer sizes: `Trainer(layers=...)` is a general
    /// trainer, `Trainer(sizes=...)` (or neither) the seed model's family.
    pub fn sizes_keyword(self) -> &'static str {
        match self {
            Family::General => "layers",
            Family::SeedModel => "sizes",
        }
    }

    /// The family chosen by the layer sizes given under each family's keyword, and those sizes
    /// (the seed model's family when none are given); `Error::Config` when both are.
    pub fn choose<T>(layers: Option<T>, sizes: Option<T>) -> Result<(Family, Option<T>)> {
        match (layers, sizes) {
            (Some(_), Some(_)) => Err(Error::Config(format!(
                "give {} (a general trainer) or {} (the seed model's family), not both",
                Family::General.sizes_keyword(),
                Family::SeedModel.sizes_keyword()
            ))),
            (Some(layers), None) => Ok((Family::General, Some(layers))),
            (None, sizes) => Ok((Family::SeedModel, sizes)),
        }
    }
}

/// A setting that differs between two sets of named values ([`differences_of`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Difference<'a> {
    pub name: &'a str,
    /// The values of each side (`None` where that side lacks the setting).
    pub mine: Option<&'a Value>,
    pub theirs: Option<&'a Value>,
}

/// The one comparison of configurations: the settings in which `mine` and `theirs` (named
/// values, e.g. two configuration dicts) differ, by [`Value::same`] (floats by their bits), the
/// schema's settings in its order first, then any other name either holds, sorted.
pub fn differences_of<'a, S: AsRef<str>>(
    mine: &'a [(S, Value)],
    theirs: &'a [(S, Value)],
) -> Vec<Difference<'a>> {
    let find = |side: &'a [(S, Value)], name: &str| {
        side.iter()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, v)| v)
    };
    let mut others: Vec<&str> = mine
        .iter()
        .chain(theirs)
        .map(|(n, _)| n.as_ref())
        .filter(|n| setting(n).is_none())
        .collect();
    others.sort_unstable();
    others.dedup();
    settings()
        .iter()
        .map(|s| s.name)
        .chain(others)
        .filter_map(|name| {
            let (a, b) = (find(mine, name), find(theirs, name));
            let same = match (a, b) {
                (Some(a), Some(b)) => a.same(b),
                (a, b) => a.is_none() && b.is_none(),
            };
            (!same).then_some(Difference {
                name,
                mine: a,
                theirs: b,
            })
        })
        .collect()
}

impl TrainerConfig {
    /// The configuration of `family` with the `given` settings (by name; the others take the
    /// family's defaults), checked setting by setting in the schema's order, then as a whole.
    /// `Error::Config` names an unknown setting, a value of the wrong type or out of range.
    pub fn from_settings<S: AsRef<str>>(
        family: Family,
        given: &[(S, Value)],
    ) -> Result<TrainerConfig> {
        if let Some((name, _)) = given.iter().find(|(n, _)| setting(n.as_ref()).is_none()) {
            let known: Vec<&str> = settings().iter().map(|s| s.name).collect();
            return Err(Error::Config(format!(
                "{} is not a setting (known: {known:?})",
                clip(name.as_ref())
            )));
        }
        let mut config = TrainerConfig::unset();
        for s in settings() {
            let value = match given.iter().rev().find(|(n, _)| n.as_ref() == s.name) {
                Some((_, value)) => value.clone(),
                None => s.default_in(family, &config),
            };
            s.set(&mut config, &value)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Placeholders for [`TrainerConfig::from_settings`] to overwrite, setting by setting (it
    /// sets every field: the schema has a row for each).
    fn unset() -> TrainerConfig {
        TrainerConfig {
            architecture: Architecture::Sizes(Vec::new()),
            loss: Loss::CrossEntropy,
            math: Math::Ieee,
            init: Init::He,
            seed: 0,
            optimizer: OptimizerConfig {
                kind: Kind::Adam,
                lr: F32::ZERO,
                beta1: F32::ZERO,
                beta2: F32::ZERO,
                eps: F32::ZERO,
                weight_decay: F32::ZERO,
                momentum: F32::ZERO,
                decay_params: DecayParams::All,
            },
            schedule: Schedule::CONSTANT,
            clip_norm: None,
            batch_size: 0,
            grad_block: None,
            shuffle: false,
            drop_last: false,
        }
    }

    /// The seed program's model: the seed model family's defaults.
    pub fn seed_model() -> TrainerConfig {
        TrainerConfig::from_settings::<&str>(Family::SeedModel, &[])
            .expect("the seed model's defaults are valid")
    }

    /// `docs/TRAINING.md`'s defaults for a general trainer with these layer sizes (checked by
    /// [`TrainerConfig::validate`], as every configuration is before it is used).
    pub fn general(sizes: Vec<usize>) -> TrainerConfig {
        TrainerConfig::defaults(Family::General, sizes)
    }

    /// The seed model's configuration with other layer sizes and initialisation seed.
    pub fn seed_style(sizes: Vec<usize>, seed: i64) -> TrainerConfig {
        TrainerConfig {
            seed,
            ..TrainerConfig::defaults(Family::SeedModel, sizes)
        }
    }

    /// `family`'s defaults with these layer sizes.
    fn defaults(family: Family, sizes: Vec<usize>) -> TrainerConfig {
        let mut config = TrainerConfig {
            architecture: Architecture::Sizes(sizes),
            ..TrainerConfig::unset()
        };
        for s in settings().iter().filter(|s| s.ty != Type::Sizes) {
            let value = s.default_in(family, &config);
            // A test builds both families from every default.
            s.set(&mut config, &value)
                .expect("the schema's defaults are valid");
        }
        config
    }

    /// The setting called `name` (`Error::Config` if there is none).
    pub fn get(&self, name: &str) -> Result<Value> {
        setting(name)
            .map(|s| s.get(self))
            .ok_or_else(|| Error::Config(format!("{} is not a setting", clip(name))))
    }

    /// Every setting, by name, in the schema's order.
    pub fn settings(&self) -> Vec<(&'static str, Value)> {
        settings().iter().map(|s| (s.name, s.get(self))).collect()
    }

    /// Checks every field; the model it describes.
    pub fn validate(&self) -> Result<Model> {
        let model = Model::new(&self.architecture)?;
        model.check_init(self.init)?;
        if model.labels_per_sample() > 1 && self.loss != Loss::CrossEntropy {
            return Err(Error::Config(format!(
                "loss = {:?}: a model whose output is a sequence is trained with cross_entropy, \
                 a label per token",
                self.loss.name()
            )));
        }
        self.optimizer.validate()?;
        self.schedule.validate(self.optimizer.lr)?;
        if let Some(c) = self.clip_norm {
            if !(F32::ZERO.ieee_lt(c) && c.ieee_lt(F32::INFINITY)) {
                return Err(Error::Config(format!(
                    "clip_norm = {} (as binary32) must be finite and > 0",
                    f32::from_bits(c.to_bits())
                )));
            }
        }
        if self.batch_size == 0 {
            return Err(Error::Config("batch_size must be at least 1".into()));
        }
        if self.grad_block == Some(0) {
            return Err(Error::Config("grad_block must be at least 1".into()));
        }
        Ok(model)
    }

    /// The settings in which this configuration differs from `other`, each as
    /// `"name value (<label>: value)"` (binary32 values as the floats they are), in
    /// `docs/TRAINING.md`'s order; empty when they are equal.
    pub fn differences(&self, other: &TrainerConfig, label: &str) -> Vec<String> {
        let (mine, theirs) = (self.settings(), other.settings());
        let shown = |v: Option<&Value>| v.map_or_else(|| "none".to_owned(), Value::to_string);
        differences_of(&mine, &theirs)
            .into_iter()
            .map(|d| {
                let (a, b) = (shown(d.mine), shown(d.theirs));
                format!("{} {a} ({label}: {b})", d.name)
            })
            .collect()
    }

    /// The gradient block length: `grad_block`, or the whole batch.
    pub fn block_len(&self) -> usize {
        self.grad_block
            .unwrap_or(self.batch_size)
            .min(self.batch_size)
    }

    /// Batches in one epoch of `samples` samples (`ceil`, or `floor` with `drop_last`).
    pub fn batches_per_epoch(&self, samples: usize) -> usize {
        if self.drop_last {
            samples / self.batch_size
        } else {
            samples.div_ceil(self.batch_size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Decay;

    fn config_error<T: std::fmt::Debug>(r: Result<T>) -> String {
        let err = r.expect_err("a configuration error");
        let Error::Config(message) = err else {
            panic!("expected Error::Config, got {err:?}")
        };
        message
    }

    fn build(family: Family, given: &[(&str, Value)]) -> Result<TrainerConfig> {
        TrainerConfig::from_settings(family, given)
    }

    fn float(x: f64) -> Value {
        Value::Float(x)
    }

    fn name(s: &str) -> Value {
        Value::Str(s.into())
    }

    /// A value other than both families' defaults for every setting, with the settings it
    /// needs to be valid.
    fn other_values() -> Vec<(&'static str, Vec<(&'static str, Value)>)> {
        let ints = |v: &[i64]| Value::Ints(v.to_vec());
        vec![
            ("layers", vec![("layers", ints(&[5, 7, 3]))]),
            ("loss", vec![("loss", name("mse"))]),
            ("math", vec![("math", name("seed"))]),
            ("init", vec![("init", name("glorot"))]),
            ("seed", vec![("seed", Value::Int(-3))]),
            ("optimizer", vec![("optimizer", name("sgd"))]),
            ("lr", vec![("lr", float(0.25))]),
            ("beta1", vec![("beta1", float(0.5))]),
            ("beta2", vec![("beta2", float(0.75))]),
            ("eps", vec![("eps", float(0.125))]),
            (
                "weight_decay",
                vec![("optimizer", name("adamw")), ("weight_decay", float(0.5))],
            ),
            (
                "decay_params",
                vec![
                    ("optimizer", name("sgd")),
                    ("decay_params", name("matrices")),
                ],
            ),
            (
                "momentum",
                vec![("optimizer", name("sgd")), ("momentum", float(0.5))],
            ),
            (
                "schedule",
                vec![("schedule", name("linear")), ("total_steps", Value::Int(9))],
            ),
            ("warmup_steps", vec![("warmup_steps", Value::Int(2))]),
            (
                "total_steps",
                vec![("schedule", name("linear")), ("total_steps", Value::Int(7))],
            ),
            (
                "step_size",
                vec![
                    ("schedule", name("step")),
                    ("step_size", Value::Int(4)),
                    ("gamma", float(0.5)),
                ],
            ),
            (
                "gamma",
                vec![
                    ("schedule", name("step")),
                    ("step_size", Value::Int(1)),
                    ("gamma", float(0.25)),
                ],
            ),
            (
                "min_lr",
                vec![
                    ("schedule", name("cosine")),
                    ("total_steps", Value::Int(9)),
                    ("min_lr", float(0.0009765625)),
                ],
            ),
            ("clip_norm", vec![("clip_norm", float(1.5))]),
            ("batch_size", vec![("batch_size", Value::Int(4))]),
            ("grad_block", vec![("grad_block", Value::Int(2))]),
            ("shuffle", vec![("shuffle", Value::Bool(false))]),
            ("drop_last", vec![("drop_last", Value::Bool(true))]),
        ]
    }

    #[test]
    fn every_setting_is_reachable_by_name_and_round_trips_through_the_record() {
        let cases = other_values();
        let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
        let table: Vec<&str> = settings().iter().map(|s| s.name).collect();
        assert_eq!(names, table, "a setting without a case here");
        for (setting, given) in cases {
            for family in Family::ALL {
                let mut given = given.clone();
                if family == Family::General && setting != "layers" {
                    given.push(("layers", Value::Ints(vec![2, 3])));
                }
                let config = build(family, &given).unwrap();
                let value = &given.iter().find(|(n, _)| *n == setting).unwrap().1;
                assert!(config.get(setting).unwrap().same(value), "{setting}");
                let text = config.to_json();
                let read = TrainerConfig::from_json(&text).unwrap();
                assert_eq!(read, config, "{text}");
                assert!(read.get(setting).unwrap().same(value), "{setting}");
                let back = build(family, &config.settings()).unwrap();
                assert_eq!(
                    back, config,
                    "{setting}: settings() rebuilds the configuration"
                );
            }
        }
    }

    #[test]
    fn the_families_defaults_are_the_documented_ones() {
        let seed = TrainerConfig::seed_model();
        assert_eq!(seed.architecture, Architecture::Sizes(vec![6, 10, 4]));
        assert_eq!(
            (seed.math, seed.init, seed.seed),
            (Math::Seed, Init::Seed, 1)
        );
        assert_eq!((seed.batch_size, seed.shuffle), (1, false));
        let general = TrainerConfig::general(vec![2, 3]);
        assert_eq!(
            build(Family::General, &[("layers", Value::Ints(vec![2, 3]))]).unwrap(),
            general
        );
        assert_eq!(
            (general.math, general.init, general.seed),
            (Math::Ieee, Init::He, 0)
        );
        assert_eq!((general.batch_size, general.shuffle), (32, true));
        let o = general.optimizer;
        let bits = [o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.momentum].map(F32::to_bits);
        // 0.001, 0.9, 0.999, 1e-8 rounded to binary32 (numpy.float32), 0, 0.
        assert_eq!(
            bits,
            [0x3A83_126F, 0x3F66_6666, 0x3F7F_BE77, 0x322B_CC77, 0, 0]
        );
        // AdamW decays by 0.01 unless told otherwise; the others do not decay.
        let adamw = build(
            Family::General,
            &[
                ("layers", Value::Ints(vec![2, 3])),
                ("optimizer", name("adamw")),
            ],
        )
        .unwrap();
        assert_eq!(adamw.optimizer.weight_decay.to_bits(), 0x3C23_D70A);
        assert_eq!(TrainerConfig::seed_style(vec![6, 10, 4], 1), seed);
    }

    #[test]
    fn records_are_the_bytes_earlier_versions_wrote() {
        // Written by the code before the schema (4e6606c) for these configurations.
        let seed = r#"{"sizes":[6,10,4],"math":"seed","general":{"loss":"cross_entropy","init":"seed","seed":1,"optimizer":{"name":"adam","lr_bits":1008981770,"beta1_bits":1063675494,"beta2_bits":1065336439,"eps_bits":841731191,"weight_decay_bits":0,"momentum_bits":0},"schedule":{"name":"constant","warmup_steps":0},"clip_norm_bits":null,"batch_size":1,"grad_block":null,"shuffle":false,"drop_last":false}}"#;
        assert_eq!(TrainerConfig::seed_model().to_json(), seed);
        let linear = r#"{"sizes":[2,3],"math":"ieee","general":{"loss":"cross_entropy","init":"he","seed":0,"optimizer":{"name":"adamw","lr_bits":981668463,"beta1_bits":1063675494,"beta2_bits":1065336439,"eps_bits":841731191,"weight_decay_bits":1008981770,"momentum_bits":0},"schedule":{"name":"linear","warmup_steps":0,"total_steps":9},"clip_norm_bits":null,"batch_size":32,"grad_block":null,"shuffle":true,"drop_last":false}}"#;
        let given = [
            ("layers", Value::Ints(vec![2, 3])),
            ("schedule", name("linear")),
            ("total_steps", Value::Int(9)),
            ("optimizer", name("adamw")),
        ];
        assert_eq!(build(Family::General, &given).unwrap().to_json(), linear);
        let step = r#"{"sizes":[3,5,2],"math":"ieee","general":{"loss":"mse","init":"glorot","seed":-3,"optimizer":{"name":"sgd","lr_bits":981668463,"beta1_bits":1063675494,"beta2_bits":1065336439,"eps_bits":841731191,"weight_decay_bits":1048576000,"momentum_bits":1056964608},"schedule":{"name":"step","warmup_steps":2,"step_size":4,"gamma_bits":1056964608},"clip_norm_bits":1069547520,"batch_size":4,"grad_block":2,"shuffle":true,"drop_last":true}}"#;
        let given = [
            ("layers", Value::Ints(vec![3, 5, 2])),
            ("loss", name("mse")),
            ("init", name("glorot")),
            ("seed", Value::Int(-3)),
            ("optimizer", name("sgd")),
            ("momentum", float(0.5)),
            ("weight_decay", float(0.25)),
            ("schedule", name("step")),
            ("step_size", Value::Int(4)),
            ("gamma", float(0.5)),
            ("warmup_steps", Value::Int(2)),
            ("clip_norm", float(1.5)),
            ("batch_size", Value::Int(4)),
            ("grad_block", Value::Int(2)),
            ("drop_last", Value::Bool(true)),
        ];
        assert_eq!(build(Family::General, &given).unwrap().to_json(), step);
    }

    #[test]
    fn bad_settings_are_config_errors_naming_the_setting() {
        let layers = || ("layers", Value::Ints(vec![2, 3]));
        let cases: Vec<(Vec<(&str, Value)>, &str)> = vec![
            (
                vec![("lrr", float(0.1))],
                "\"lrr\" is not a setting (known: [\"layers\"",
            ),
            (
                vec![("loss", name("hinge"))],
                "loss = \"hinge\" is not known (known: [\"cross_entropy\", \"mse\"])",
            ),
            (vec![("lr", name("x"))], "lr = \"x\" is not a float"),
            (vec![("lr", Value::None)], "lr = None is not a float"),
            (
                vec![("shuffle", Value::Int(1))],
                "shuffle = 1 is not a bool",
            ),
            (
                vec![("batch_size", Value::Int(0))],
                "batch_size = 0 must be at least 1",
            ),
            (
                vec![("warmup_steps", Value::Int(-1))],
                "warmup_steps = -1 must be at least 0",
            ),
            (
                vec![("grad_block", float(2.0))],
                "grad_block = 2.0 is not an integer or none",
            ),
            (
                vec![("lr", float(1e40))],
                "lr = 1e40 (binary32 inf) is outside the accepted range",
            ),
            (
                vec![("weight_decay", float(0.5))],
                "weight_decay = 0.5 (binary32 0.5) is outside",
            ),
            (
                vec![("schedule", name("linear"))],
                "schedule=\"linear\" takes total_steps (and no",
            ),
            (
                vec![("gamma", float(0.5))],
                "schedule=\"constant\" takes no total_steps",
            ),
            (
                vec![("schedule", name("step")), ("gamma", float(0.5))],
                "schedule=\"step\" takes step_size and gamma",
            ),
            (
                vec![("min_lr", float(0.001))],
                "schedule=\"constant\" takes no total_steps, step_size, gamma or min_lr",
            ),
            (
                vec![("schedule", name("cosine"))],
                "schedule=\"cosine\" takes total_steps and min_lr",
            ),
            (
                vec![
                    ("schedule", name("cosine")),
                    ("total_steps", Value::Int(5)),
                    ("min_lr", float(1.0)),
                ],
                "min_lr = 1.0 (as binary32) must be 0, or normal and at most lr",
            ),
            (
                vec![
                    ("schedule", name("cosine")),
                    ("total_steps", Value::Int(5)),
                    ("min_lr", float(1e-40)),
                ],
                "min_lr = 1e-40 (as binary32) must be 0, or normal",
            ),
            (
                vec![("decay_params", name("matrices"))],
                "decay_params = \"matrices\" is for adamw and sgd",
            ),
            (
                vec![("decay_params", name("biases"))],
                "decay_params = \"biases\" is not known (known: [\"all\", \"matrices\"])",
            ),
            (
                vec![("clip_norm", float(-1.0))],
                "clip_norm = -1 (as binary32) must be finite",
            ),
            (
                vec![("layers", Value::Ints(vec![6]))],
                "at least an input and an output",
            ),
        ];
        for (given, expected) in cases {
            for family in Family::ALL {
                let mut given = given.clone();
                if family == Family::General && given.iter().all(|(n, _)| *n != "layers") {
                    given.push(layers());
                }
                let message = config_error(build(family, &given));
                assert!(message.contains(expected), "{message:?} lacks {expected:?}");
            }
        }
        let message = config_error(build(Family::General, &[]));
        assert!(message.starts_with("layers = None"), "{message}");
        let message = config_error(Family::choose(Some(1), Some(2)));
        assert!(
            message.contains("give layers (a general trainer) or sizes"),
            "{message}"
        );
        assert_eq!(
            Family::choose(None, Some(2)).unwrap(),
            (Family::SeedModel, Some(2))
        );
        assert_eq!(
            Family::choose(Some(1), None).unwrap(),
            (Family::General, Some(1))
        );
        config_error(TrainerConfig::seed_model().get("lrr"));
    }

    #[test]
    fn every_default_passes_its_own_check() {
        let seed = TrainerConfig::seed_model();
        for s in settings() {
            for family in Family::ALL {
                let value = s.default_in(family, &seed);
                if !(s.name == "layers" && family == Family::General) {
                    s.check(&value).unwrap();
                }
            }
        }
    }

    #[test]
    fn names_round_trip() {
        fn check<T: Copy + PartialEq + std::fmt::Debug>(
            all: &[T],
            names: &[&str],
            name: fn(T) -> &'static str,
            from_name: fn(&str) -> Option<T>,
        ) {
            assert_eq!(all.len(), names.len());
            for (&v, &n) in all.iter().zip(names) {
                assert_eq!(name(v), n);
                assert_eq!(from_name(n), Some(v));
            }
            assert_eq!(from_name("no such name"), None);
        }
        check(&Loss::ALL, &Loss::NAMES, Loss::name, Loss::from_name);
        check(&Math::ALL, &Math::NAMES, Math::name, Math::from_name);
        check(&Init::ALL, &Init::NAMES, Init::name, Init::from_name);
        check(&Kind::ALL, &Kind::NAMES, Kind::name, Kind::from_name);
        check(
            &Family::ALL,
            &Family::NAMES,
            Family::name,
            Family::from_name,
        );
        use crate::schedule::DecayKind;
        check(
            &DecayKind::ALL,
            &DecayKind::NAMES,
            DecayKind::name,
            DecayKind::from_name,
        );
        assert_eq!(Loss::NAMES, ["cross_entropy", "mse"]);
        check(
            &DecayParams::ALL,
            &DecayParams::NAMES,
            DecayParams::name,
            DecayParams::from_name,
        );
        assert_eq!(DecayKind::NAMES, ["constant", "linear", "step", "cosine"]);
        assert_eq!(DecayParams::NAMES, ["all", "matrices"]);
    }

    #[test]
    fn differences_name_each_setting_with_both_values() {
        let seed = TrainerConfig::seed_model();
        assert!(seed.differences(&seed, "x").is_empty());
        let other = build(
            Family::SeedModel,
            &[
                ("lr", float(0.5)),
                ("schedule", name("linear")),
                ("total_steps", Value::Int(5)),
                ("clip_norm", float(1.0)),
            ],
        )
        .unwrap();
        assert_eq!(
            other.differences(&seed, "the seed model"),
            [
                "lr 0.5 (the seed model: 0.01)",
                "schedule linear (the seed model: constant)",
                "total_steps 5 (the seed model: none)",
                "clip_norm 1 (the seed model: none)",
            ]
        );
        // -0.0 and 0.0 are different settings; names outside the schema are compared too.
        let a = [("momentum", float(0.0)), ("extra", Value::Int(1))];
        let b = [("momentum", float(-0.0))];
        let names: Vec<&str> = differences_of(&a, &b).iter().map(|d| d.name).collect();
        assert_eq!(names, ["momentum", "extra"]);
    }

    #[test]
    fn records_round_trip() {
        let mut general = TrainerConfig {
            architecture: Architecture::Sizes(vec![5, 7, 3]),
            loss: Loss::Mse,
            math: Math::Ieee,
            init: Init::Glorot,
            seed: -3,
            schedule: Schedule {
                warmup_steps: 2,
                decay: Decay::Step {
                    step_size: 4,
                    gamma: F32::ONE / F32::from_i32(2),
                },
            },
            clip_norm: Some(F32::ONE),
            batch_size: 4,
            grad_block: Some(2),
            shuffle: true,
            drop_last: true,
            ..TrainerConfig::seed_model()
        };
        general.optimizer.kind = Kind::Sgd;
        general.optimizer.momentum = F32::ONE / F32::from_i32(2);
        for config in [TrainerConfig::seed_model(), general] {
            let text = config.to_json();
            assert_eq!(TrainerConfig::from_json(&text).unwrap(), config, "{text}");
        }
    }

    #[test]
    fn records_written_before_the_general_trainer_are_the_seed_configuration() {
        let old = r#"{"sizes":[6,10,4],"math":"seed","adam":{"lr_bits":1008981770,
            "beta1_bits":1063675494,"beta2_bits":1065336439,"eps_bits":841731191}}"#;
        assert_eq!(
            TrainerConfig::from_json(old).unwrap(),
            TrainerConfig::seed_model()
        );
    }

    #[test]
    fn bad_records_are_config_errors() {
        let seed = TrainerConfig::seed_model().to_json();
        for bad in [
            seed.replace("\"seed\",\"general\"", "\"fast\",\"general\""),
            seed.replace("\"adam\"", "\"adagrad\""),
            seed.replace("\"cross_entropy\"", "\"hinge\""),
            seed.replace("\"batch_size\":1", "\"batch_size\":0"),
            seed.replace("\"shuffle\"", "\"extra\":1,\"shuffle\""),
            seed.replace("\"sizes\":[6,10,4]", "\"sizes\":[6]"),
            "{}".to_string(),
        ] {
            assert!(
                matches!(TrainerConfig::from_json(&bad), Err(Error::Config(_))),
                "{bad}"
            );
        }
    }
}
