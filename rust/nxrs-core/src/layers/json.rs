//! The JSON form of a layer (`docs/TRAINING.md` section 15.1): an object with its `type` and
//! its parameters under PyTorch's names. What `--model FILE.json`, a checkpoint's configuration
//! and the Python layer objects give; every parameter is written out when read back.

use super::LayerSpec;
use crate::error::{Error, Result};
use crate::softf32::F32;
use serde_json::{json, Map, Value};

/// PyTorch's defaults (binary64, rounded to binary32 as every float setting is).
const DROPOUT_P: f64 = 0.5;
const MOMENTUM: f64 = 0.1;
const EPS: f64 = 1e-5;

/// One layer object's keys, taken one by one so that a key left over is an error.
struct Keys {
    what: String,
    map: Map<String, Value>,
}

impl Keys {
    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    fn count(&mut self, key: &str) -> Result<usize> {
        let v = self
            .take(key)
            .ok_or_else(|| Error::Config(format!("{}: {key} is required", self.what)))?;
        self.size(key, &v)
    }

    fn size(&self, key: &str, v: &Value) -> Result<usize> {
        v.as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                Error::Config(format!(
                    "{}: {key} must be a non-negative integer or a list of them, got {v}",
                    self.what
                ))
            })
    }

    /// An integer for every dimension, or a list of `dims` integers; `default` when absent.
    fn sizes(&mut self, key: &str, dims: usize, default: Option<Vec<usize>>) -> Result<Vec<usize>> {
        let Some(v) = self.take(key) else {
            return default
                .ok_or_else(|| Error::Config(format!("{}: {key} is required", self.what)));
        };
        let sizes = match &v {
            Value::Array(items) => items
                .iter()
                .map(|item| self.size(key, item))
                .collect::<Result<Vec<usize>>>()?,
            other => vec![self.size(key, other)?; dims],
        };
        if sizes.len() != dims {
            return Err(Error::Config(format!(
                "{}: {key} needs {dims} size(s), got {v}",
                self.what
            )));
        }
        Ok(sizes)
    }

    /// A binary32 parameter: `key`, a number (rounded to binary32), or `{key}_bits`, its bit
    /// pattern (as a configuration record writes it); `default` when neither is given.
    fn float(&mut self, key: &str, default: f64) -> Result<F32> {
        Ok(self
            .optional_float(key)?
            .unwrap_or_else(|| F32::from_f64_bits(default.to_bits())))
    }

    /// [`Keys::float`] without a default: `None` when neither form is given.
    fn optional_float(&mut self, key: &str) -> Result<Option<F32>> {
        let bits_key = format!("{key}_bits");
        Ok(Some(match (self.take(key), self.take(&bits_key)) {
            (Some(_), Some(_)) => {
                return Err(Error::Config(format!(
                    "{}: {key} and {bits_key} are the same parameter: give one",
                    self.what
                )))
            }
            (None, Some(v)) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(F32::from_bits)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "{}: {bits_key} must be a u32 bit pattern, got {v}",
                        self.what
                    ))
                })?,
            (Some(v), None) => {
                let x = v.as_f64().filter(|_| !v.is_boolean()).ok_or_else(|| {
                    Error::Config(format!("{}: {key} must be a number, got {v}", self.what))
                })?;
                F32::from_f64_bits(x.to_bits())
            }
            (None, None) => return Ok(None),
        }))
    }

    /// A true/false parameter; `default` when absent.
    fn boolean(&mut self, key: &str, default: bool) -> Result<bool> {
        match self.take(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(b),
            Some(v) => Err(Error::Config(format!(
                "{}: {key} must be true or false, got {v}",
                self.what
            ))),
        }
    }

    fn done(self) -> Result<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(key) => Err(Error::Config(format!(
                "{}: unknown parameter {key:?}",
                self.what
            ))),
        }
    }
}

impl LayerSpec {
    /// The layer described by a JSON object (`position` in the list, for messages).
    pub fn from_json(v: &Value, position: usize) -> Result<LayerSpec> {
        let Value::Object(map) = v else {
            return Err(Error::Config(format!(
                "layer {position}: a layer is an object with a \"type\", got {v}"
            )));
        };
        let mut map = map.clone();
        let kind = match map.remove("type") {
            Some(Value::String(s)) => s,
            _ => {
                return Err(Error::Config(format!(
                    "layer {position}: a layer object needs \"type\" (a layer's name), got {v}"
                )))
            }
        };
        let mut keys = Keys {
            what: format!("layer {position} ({kind})"),
            map,
        };
        let dims = |name: &str| usize::from(name.ends_with("2d")) + 1;
        let spec = match kind.as_str() {
            "Input" => {
                let shape = match keys.take("shape") {
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|item| keys.size("shape", item))
                        .collect::<Result<Vec<usize>>>()?,
                    _ => {
                        return Err(Error::Config(format!(
                            "{}: shape (a list) is required",
                            keys.what
                        )))
                    }
                };
                LayerSpec::Input { shape }
            }
            "Dense" => LayerSpec::Dense {
                units: keys.count("units")?,
                bias: keys.boolean("bias", true)?,
                std: keys.optional_float("std")?,
            },
            "Embedding" => LayerSpec::Embedding {
                vocab: keys.count("vocab")?,
                width: keys.count("width")?,
                std: keys.optional_float("std")?,
            },
            "PositionalEmbedding" => LayerSpec::PositionalEmbedding {
                context: keys.count("context")?,
                width: keys.count("width")?,
                std: keys.optional_float("std")?,
            },
            "CausalSelfAttention" => {
                if keys.boolean("bias", false)? {
                    return Err(Error::Config(format!(
                        "{}: bias=True is not supported: the projections have no biases",
                        keys.what
                    )));
                }
                LayerSpec::CausalSelfAttention {
                    heads: keys.count("heads")?,
                    std: keys.optional_float("std")?,
                    proj_std: keys.optional_float("proj_std")?,
                }
            }
            "TiedHead" => LayerSpec::TiedHead,
            "GELU" => LayerSpec::GELU,
            "Residual" => {
                let Some(Value::Array(items)) = keys.take("layers") else {
                    return Err(Error::Config(format!(
                        "{}: layers (a list of layer objects) is required",
                        keys.what
                    )));
                };
                let layers = items
                    .iter()
                    .enumerate()
                    .map(|(k, item)| {
                        LayerSpec::from_json(item, position).map_err(|e| match e {
                            Error::Config(m) => {
                                Error::Config(format!("Residual's layers[{k}]: {m}"))
                            }
                            other => other,
                        })
                    })
                    .collect::<Result<Vec<LayerSpec>>>()?;
                LayerSpec::Residual { layers }
            }
            "Conv1d" | "Conv2d" => {
                let d = dims(&kind);
                LayerSpec::Conv {
                    out_channels: keys.count("out_channels")?,
                    kernel_size: keys.sizes("kernel_size", d, None)?,
                    stride: keys.sizes("stride", d, Some(vec![1; d]))?,
                    padding: keys.sizes("padding", d, Some(vec![0; d]))?,
                }
            }
            "MaxPool1d" | "MaxPool2d" | "AvgPool1d" | "AvgPool2d" => {
                let d = dims(&kind);
                let kernel_size = keys.sizes("kernel_size", d, None)?;
                let stride = keys.sizes("stride", d, Some(kernel_size.clone()))?;
                LayerSpec::Pool {
                    max: kind.starts_with("Max"),
                    kernel_size,
                    stride,
                }
            }
            "Flatten" => LayerSpec::Flatten,
            "ReLU" => LayerSpec::ReLU,
            "Tanh" => LayerSpec::Tanh,
            "Sigmoid" => LayerSpec::Sigmoid,
            "Dropout" => LayerSpec::Dropout {
                p: keys.float("p", DROPOUT_P)?,
            },
            "BatchNorm1d" | "BatchNorm2d" => LayerSpec::BatchNorm {
                dims: dims(&kind),
                momentum: keys.float("momentum", MOMENTUM)?,
                eps: keys.float("eps", EPS)?,
            },
            "LayerNorm" => LayerSpec::LayerNorm {
                eps: keys.float("eps", EPS)?,
                bias: keys.boolean("bias", true)?,
            },
            _ => {
                return Err(Error::Config(format!(
                    "layer {position}: unknown layer type {kind:?} (known: Input, Dense, Conv1d, \
                     Conv2d, MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, Flatten, ReLU, Tanh, \
                     Sigmoid, GELU, Dropout, BatchNorm1d, BatchNorm2d, LayerNorm, Residual, Embedding, \
                     PositionalEmbedding, CausalSelfAttention, TiedHead)"
                )))
            }
        };
        keys.done()?;
        Ok(spec)
    }

    /// The layer described by a JSON object's text (`position` in the list, for messages).
    pub fn from_json_text(text: &str, position: usize) -> Result<LayerSpec> {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            // The text of a layer object given in Python is well formed (json.dumps wrote it):
            // only nesting beyond the parser's limit (128) fails, which is no layer.
            let why = if e.to_string().starts_with("recursion limit exceeded") {
                "its values are nested too deeply"
            } else {
                "not JSON"
            };
            Error::Config(format!("layer {position}: {why}: {e}"))
        })?;
        LayerSpec::from_json(&v, position)
    }

    /// A list's JSON text (an array of [`LayerSpec::to_json`] objects, floats as numbers).
    pub fn list_json(layers: &[LayerSpec]) -> String {
        Value::Array(layers.iter().map(|l| l.to_json(Floats::Numbers)).collect()).to_string()
    }

    /// The layer's JSON object, every parameter written out, its binary32 parameters as
    /// `floats` says: reading it back gives the same bits either way.
    pub fn to_json(&self, floats: Floats) -> Value {
        let float = |x: F32| match floats {
            Floats::Numbers => json!(f64::from(f32::from_bits(x.to_bits()))),
            Floats::Bits => json!(x.to_bits()),
        };
        // Under its bits name when written as bits (`eps_bits`), as the record's other
        // binary32 settings are.
        let key = |name: &str| match floats {
            Floats::Numbers => name.to_string(),
            Floats::Bits => format!("{name}_bits"),
        };
        // A parameter written only when given (`std`), so that the forms without it keep
        // their bytes.
        let optional = |v: &mut Value, name: &str, x: Option<F32>| {
            if let Some(x) = x {
                v[key(name)] = float(x);
            }
        };
        match self {
            LayerSpec::Input { shape } => json!({"type": "Input", "shape": shape}),
            LayerSpec::Dense { units, bias, std } => {
                let mut v = json!({"type": "Dense", "units": units});
                without_bias(&mut v, *bias);
                optional(&mut v, "std", *std);
                v
            }
            LayerSpec::Embedding { vocab, width, std } => {
                let mut v = json!({"type": "Embedding", "vocab": vocab, "width": width});
                optional(&mut v, "std", *std);
                v
            }
            LayerSpec::PositionalEmbedding {
                context,
                width,
                std,
            } => {
                let mut v =
                    json!({"type": "PositionalEmbedding", "context": context, "width": width});
                optional(&mut v, "std", *std);
                v
            }
            LayerSpec::CausalSelfAttention {
                heads,
                std,
                proj_std,
            } => {
                let mut v = json!({"type": "CausalSelfAttention", "heads": heads});
                optional(&mut v, "std", *std);
                optional(&mut v, "proj_std", *proj_std);
                v
            }
            LayerSpec::TiedHead => json!({"type": "TiedHead"}),
            LayerSpec::Residual { layers } => json!({
                "type": "Residual",
                "layers": layers.iter().map(|l| l.to_json(floats)).collect::<Vec<_>>(),
            }),
            LayerSpec::Conv {
                out_channels,
                kernel_size,
                stride,
                padding,
            } => json!({
                "type": self.type_name(), "out_channels": out_channels,
                "kernel_size": kernel_size, "stride": stride, "padding": padding,
            }),
            LayerSpec::Pool {
                kernel_size,
                stride,
                ..
            } => json!({
                "type": self.type_name(), "kernel_size": kernel_size, "stride": stride,
            }),
            LayerSpec::Flatten
            | LayerSpec::ReLU
            | LayerSpec::Tanh
            | LayerSpec::Sigmoid
            | LayerSpec::GELU => {
                json!({"type": self.type_name()})
            }
            LayerSpec::Dropout { p } => json!({"type": "Dropout", key("p"): float(*p)}),
            LayerSpec::BatchNorm { momentum, eps, .. } => json!({
                "type": self.type_name(), key("momentum"): float(*momentum),
                key("eps"): float(*eps),
            }),
            LayerSpec::LayerNorm { eps, bias } => {
                let mut v = json!({"type": "LayerNorm", key("eps"): float(*eps)});
                without_bias(&mut v, *bias);
                v
            }
        }
    }
}

/// `"bias": false` added to a layer object without biases; nothing with them, so that every
/// model from before the key existed keeps its configuration's bytes (and digests).
fn without_bias(v: &mut Value, bias: bool) {
    if !bias {
        v["bias"] = Value::Bool(false);
    }
}

/// How [`LayerSpec::to_json`] writes a binary32 parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floats {
    /// As a JSON number, the binary64 value of its bits (for people and `--model` files).
    Numbers,
    /// As its bit pattern under `{name}_bits` (a checkpoint's configuration record, whose
    /// bytes the state digest covers: no decimal formatting rule enters them).
    Bits,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_norm(v: Value) -> Result<LayerSpec> {
        LayerSpec::from_json(&v, 1)
    }

    #[test]
    fn a_binary32_parameter_reads_as_a_number_or_as_its_bits_alike() {
        let spec = batch_norm(json!({"type": "BatchNorm1d", "momentum": 0.25, "eps": 1e-3}));
        let spec = spec.unwrap();
        let bits = spec.to_json(Floats::Bits);
        assert_eq!(bits["eps_bits"], json!(1e-3f32.to_bits()));
        assert_eq!(bits.get("eps"), None);
        // Records written before the bits form (numbers) and after it give the same layer.
        assert_eq!(LayerSpec::from_json(&bits, 1).unwrap(), spec);
        let numbers = spec.to_json(Floats::Numbers);
        assert_eq!(LayerSpec::from_json(&numbers, 1).unwrap(), spec);
    }

    #[test]
    fn a_parameter_given_twice_or_bits_that_are_not_a_u32_are_refused() {
        let refused = |v: Value| match batch_norm(v) {
            Err(Error::Config(message)) => message,
            other => panic!("{other:?}"),
        };
        let both = refused(json!({"type": "BatchNorm2d", "eps": 1e-3, "eps_bits": 1}));
        assert!(both.contains("eps and eps_bits"), "{both}");
        let wide = refused(json!({"type": "BatchNorm2d", "eps_bits": 1u64 << 32}));
        assert!(wide.contains("eps_bits must be a u32"), "{wide}");
        let text = refused(json!({"type": "Dropout", "p_bits": "0.5"}));
        assert!(text.contains("p_bits must be a u32"), "{text}");
    }
}
