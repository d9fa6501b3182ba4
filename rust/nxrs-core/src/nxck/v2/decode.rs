//! Reading v2 files: validation of every header field before use, then zero-copy access.
//!
//! The checks run in the order `docs/FORMAT.md` lists them, and every one of them bounds what
//! the next may touch: no slice is taken and nothing is allocated from a number in the file
//! before that number has been checked against the file's length or the model's limits.

use super::{
    header_crc, json, prelude, HeaderJson, Scalars, TensorJson, ALIGN, DTYPE_F32, MATH_SEED,
    MAX_HEADER_LEN, PRELUDE_LEN,
};
use crate::adam::AdamConfig;
use crate::error::{clip, Error, Result};
use crate::mlp::{Mlp, MAX_LAYER_SIZE, MAX_PARAMETERS};
use crate::nxck::mapped::FileBytes;
use crate::nxck::{cells, detect, from_file_config, tensors, Format};
use crate::softf32::F32;
use crate::trainer::{TrainState, Trainer, TrainerConfig};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

/// How much of a file [`Checkpoint::open`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Everything, including every tensor's CRC-32C (reads every byte of the file).
    Full,
    /// Everything except the tensors' CRC-32Cs: the prelude, the header's CRC, the JSON, the
    /// layout and the padding. Opening then touches only the header's pages; check tensors
    /// later with [`Checkpoint::verify_tensor`] or [`Checkpoint::verify_all`].
    HeaderOnly,
}

/// One entry of the tensor table, validated: the tensor is inside the file, 64-byte aligned,
/// overlaps nothing, and has the shape the configuration gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Always `"f32"` in version 2: IEEE binary32, little-endian.
    pub dtype: String,
    /// Row-major; weight matrices are `[outputs, inputs]`, biases and moments as their
    /// parameter.
    pub shape: Vec<usize>,
    /// Where the data starts in the file (a multiple of 64).
    pub offset: usize,
    /// Length of the data, `4 * product(shape)`.
    pub nbytes: usize,
    /// CRC-32C of the data, as stored in the header.
    pub crc32c: u32,
}

impl TensorInfo {
    /// The data's byte range in the file.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.nbytes
    }

    /// Number of cells, `product(shape)`.
    pub fn cells(&self) -> usize {
        self.nbytes / 4
    }
}

/// An open, validated v2 checkpoint. Holds the file's bytes (a read-only mapping when opened
/// from a path); tensor data is borrowed from them without copying.
///
/// For zero-copy views in another runtime, share the `Checkpoint` (e.g. in an `Arc`) and hand
/// out pointers from [`Checkpoint::tensor_bytes`]: the bytes are a mapping or a heap buffer that
/// is never reallocated, so their addresses stay valid and unchanged for as long as the
/// `Checkpoint` lives, even if the `Checkpoint` value itself is moved. They are read-only. When
/// [`Checkpoint::is_mapped`], each tensor's bytes start at a 64-byte-aligned address (the
/// mapping is page-aligned and offsets are multiples of 64), so on little-endian hosts they can
/// be viewed as `f32`/`u32` arrays in place.
#[derive(Debug)]
pub struct Checkpoint {
    bytes: FileBytes,
    config: TrainerConfig,
    math: String,
    scalars: Scalars,
    /// In file order (the table's order).
    tensors: Vec<TensorInfo>,
    /// Table index of each tensor, in `TrainState::tensors` order.
    model_order: Vec<usize>,
    by_name: HashMap<String, usize>,
}

impl Checkpoint {
    /// Maps and validates the file at `path`, for zero-copy access to its tensors. The mapping
    /// shows the file as it is now: a program that rewrites the file in place (instead of
    /// replacing it by a rename, as nxrs does) changes the tensors under the reader, or gets it
    /// killed by `SIGBUS` (see [`crate::nxck::mapped`]). To copy the state out, read the file
    /// instead: `Checkpoint::from_bytes(FileBytes::read(path)?, verify)`.
    pub fn open(path: &Path, verify: Verify) -> Result<Checkpoint> {
        Checkpoint::from_bytes(FileBytes::map(path)?, verify)
    }

    /// Validates bytes already mapped or in memory.
    pub fn from_bytes(bytes: FileBytes, verify: Verify) -> Result<Checkpoint> {
        let (header_len, json) = check_prelude(&bytes)?;
        let header = json::parse(json)?;
        let config = check_config(&header)?;
        let scalars = header.scalars;
        if scalars.epoch < 0 {
            return Err(Error::Header(format!(
                "scalars.epoch = {} is negative",
                scalars.epoch
            )));
        }
        let (tensors, model_order) = check_table(
            &header.tensors,
            &config.sizes,
            &bytes,
            PRELUDE_LEN + header_len,
        )?;
        // The checks above are Mlp::new's; ask it too, now that the model is known to be small.
        Mlp::new(config.sizes.clone()).map_err(from_file_config)?;
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let checkpoint = Checkpoint {
            bytes,
            config,
            math: header.config.math,
            scalars,
            tensors,
            model_order,
            by_name,
        };
        if verify == Verify::Full {
            checkpoint.verify_all()?;
        }
        Ok(checkpoint)
    }

    /// The configuration to build a [`crate::Trainer`] for this state.
    pub fn config(&self) -> &TrainerConfig {
        &self.config
    }

    /// The arithmetic the state was trained with (`"seed"`, the only one this build knows).
    pub fn math(&self) -> &str {
        &self.math
    }

    pub fn scalars(&self) -> Scalars {
        self.scalars
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// A tensor's data: `nbytes` little-endian binary32 cells, borrowed from the file.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).map(|t| self.data(t))
    }

    /// The data of a tensor of this checkpoint's table.
    pub fn data(&self, tensor: &TensorInfo) -> &[u8] {
        &self.bytes[tensor.range()]
    }

    /// Checks one tensor's CRC-32C (`Error::Input` for a name not in the table).
    pub fn verify_tensor(&self, name: &str) -> Result<()> {
        let tensor = self
            .tensor(name)
            .ok_or_else(|| Error::Input(format!("the checkpoint has no tensor {name:?}")))?;
        let computed = crc32c::crc32c(self.data(tensor));
        if computed != tensor.crc32c {
            return Err(Error::Checksum {
                what: format!("tensor {}", tensor.name),
                stored: tensor.crc32c,
                computed,
            });
        }
        Ok(())
    }

    /// Checks every tensor's CRC-32C, in file order.
    pub fn verify_all(&self) -> Result<()> {
        self.tensors
            .iter()
            .try_for_each(|t| self.verify_tensor(&t.name))
    }

    /// The training state, decoded (copied) out of the file.
    pub fn to_state(&self) -> TrainState {
        let n_params = self.config.sizes.len().saturating_sub(1) * 2;
        let mut state = TrainState::fresh(vec![Vec::new(); n_params]);
        for (slot, &i) in state.tensors_mut().into_iter().zip(&self.model_order) {
            *slot = cells::decode_le(self.data(&self.tensors[i]));
        }
        state.epoch = self.scalars.epoch;
        state.b1t = F32::from_bits(self.scalars.b1t_bits);
        state.b2t = F32::from_bits(self.scalars.b2t_bits);
        state
    }

    /// A trainer with this checkpoint's configuration and a copy of its state. With
    /// `Verify::Full` every tensor's CRC-32C is checked while copying
    /// ([`Checkpoint::to_state_verified`]); `Verify::HeaderOnly` is for a checkpoint whose
    /// tensors were verified already (opened with `Verify::Full`). A configuration the trainer
    /// refuses is a defect of the file: `Error::Header`.
    pub fn to_trainer(&self, verify: Verify) -> Result<Trainer> {
        let state = match verify {
            Verify::Full => self.to_state_verified()?,
            Verify::HeaderOnly => self.to_state(),
        };
        Trainer::from_state(&self.config, state).map_err(from_file_config)
    }

    /// [`Checkpoint::to_state`] with every tensor's CRC-32C checked, as [`Verify::Full`] does.
    /// The checksums are computed on a second thread while this one copies the tensors out
    /// (both only read the file's bytes), so the check costs little more than the copy. The
    /// error is the one [`Checkpoint::verify_all`] gives.
    pub fn to_state_verified(&self) -> Result<TrainState> {
        let (verified, state) = std::thread::scope(|s| {
            let verifier = s.spawn(|| self.verify_all());
            let state = self.to_state();
            let verified = verifier
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (verified, state)
        });
        verified.map(|()| state)
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the bytes are a file mapping (see the type's documentation on alignment).
    pub fn is_mapped(&self) -> bool {
        self.bytes.is_mapped()
    }
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(std::array::from_fn(|k| bytes[at + k]))
}

/// Checks the prelude and the header's CRC; returns the header's length and JSON bytes.
fn check_prelude(bytes: &[u8]) -> Result<(usize, &[u8])> {
    if detect(bytes)? == Format::V1 {
        return Err(Error::UnsupportedVersion(1));
    }
    let actual = bytes.len() as u64;
    if bytes.len() < PRELUDE_LEN {
        return Err(Error::Length {
            expected: PRELUDE_LEN as u64,
            actual,
            what: format!("the file ends inside the {PRELUDE_LEN}-byte v2 prelude"),
        });
    }
    let file_len = read_u64(bytes, prelude::FILE_LEN);
    if file_len != actual {
        return Err(Error::Length {
            expected: file_len,
            actual,
            what: "the prelude's file_len".into(),
        });
    }
    let header_len = read_u32(bytes, prelude::HEADER_LEN) as usize;
    if header_len > MAX_HEADER_LEN {
        return Err(Error::Header(format!(
            "header_len {header_len} exceeds the limit of {MAX_HEADER_LEN} bytes"
        )));
    }
    let header_end = PRELUDE_LEN + header_len;
    if header_end > bytes.len() {
        return Err(Error::Length {
            expected: header_end as u64,
            actual,
            what: format!("the prelude's header_len {header_len} runs past the end of the file"),
        });
    }
    let json = &bytes[PRELUDE_LEN..header_end];
    let stored = read_u32(bytes, prelude::HEADER_CRC);
    let computed = header_crc(bytes, json);
    if stored != computed {
        return Err(Error::Checksum {
            what: "header".into(),
            stored,
            computed,
        });
    }
    let flags = read_u32(bytes, prelude::FLAGS);
    if flags != 0 {
        return Err(Error::Header(format!(
            "prelude flags are {flags:#010x}; version 2 defines none, they must be 0"
        )));
    }
    Ok((header_len, json))
}

/// The configuration, with the sizes bounded before any of them is used to size anything.
fn check_config(header: &HeaderJson) -> Result<TrainerConfig> {
    let c = &header.config;
    if c.math != MATH_SEED {
        return Err(Error::Header(format!(
            "config.math {} is not implemented by this build (known: {MATH_SEED:?})",
            clip(&c.math)
        )));
    }
    if c.sizes.len() < 2 {
        return Err(Error::Header(format!(
            "config.sizes {} has fewer than two layer sizes",
            clip(&c.sizes)
        )));
    }
    let mut sizes = Vec::with_capacity(c.sizes.len());
    let mut params: u64 = 0;
    for (l, &n) in c.sizes.iter().enumerate() {
        if n == 0 || n > MAX_LAYER_SIZE as u64 {
            return Err(Error::Header(format!(
                "config.sizes[{l}] = {n} is outside 1..={MAX_LAYER_SIZE}"
            )));
        }
        if let Some(&prev) = sizes.last() {
            // At most 2^24 * 2^24 + 2^24 per layer, and the running total stays below 2^28 + that.
            params += (prev as u64) * n + n;
            if params > MAX_PARAMETERS as u64 {
                return Err(Error::Header(format!(
                    "config.sizes describe more than {MAX_PARAMETERS} parameters"
                )));
            }
        }
        sizes.push(n as usize);
    }
    let bits = F32::from_bits;
    Ok(TrainerConfig {
        sizes,
        adam: AdamConfig {
            lr: bits(c.adam.lr_bits),
            beta1: bits(c.adam.beta1_bits),
            beta2: bits(c.adam.beta2_bits),
            eps: bits(c.adam.eps_bits),
        },
    })
}

/// Validates the tensor table against the model and the file: every model tensor exactly once,
/// with its shape; data inside the file in table order, 64-byte aligned, each starting less than
/// 64 bytes after the previous region, every gap byte zero, the last tensor ending the file.
/// Returns the tensors in table order and the table index of each model tensor.
///
/// The work and memory are bounded by the table's length, not the model's size: the model is
/// only known to be as small as the file once every one of its tensors has been found in it.
fn check_table(
    table: &[TensorJson],
    sizes: &[usize],
    bytes: &[u8],
    header_end: usize,
) -> Result<(Vec<TensorInfo>, Vec<usize>)> {
    let layers = sizes.len() - 1;
    let file_len = bytes.len() as u64;
    // Model position -> table index, for the positions found so far.
    let mut found: HashMap<usize, usize> = HashMap::with_capacity(table.len());
    let mut tensors = Vec::with_capacity(table.len());
    let mut prev_end = header_end as u64;
    let mut prev = "the header".to_string();

    for (i, t) in table.iter().enumerate() {
        let name = &t.name;
        // Used once `name` is known to be one of the model's (short) names.
        let header = |what: String| Error::Header(format!("tensor {name}: {what}"));
        let Some(k) = tensors::position(name, layers) else {
            return Err(Error::Header(format!(
                "tensor table entry {i}: {} is not a tensor of the configured model",
                clip(name)
            )));
        };
        if found.insert(k, i).is_some() {
            return Err(header("appears more than once in the tensor table".into()));
        }
        if t.dtype != DTYPE_F32 {
            return Err(header(format!(
                "dtype {} is not supported (version 2 has only {DTYPE_F32:?})",
                clip(&t.dtype)
            )));
        }
        let shape = tensors::shape(k, sizes);
        if t.shape.len() != shape.len() || t.shape.iter().zip(&shape).any(|(&a, &b)| a != b as u64)
        {
            return Err(header(format!(
                "shape {} does not match the configured model's {shape:?}",
                clip(&t.shape)
            )));
        }
        // Bounded by MAX_PARAMETERS (checked with the config), so no overflow.
        let nbytes = 4 * shape.iter().product::<usize>() as u64;
        if t.nbytes != nbytes {
            return Err(header(format!(
                "nbytes {} does not match its shape {shape:?} (4 * {} = {nbytes})",
                t.nbytes,
                nbytes / 4
            )));
        }
        let offset = t.offset;
        if offset % ALIGN as u64 != 0 {
            return Err(header(format!(
                "offset {offset} is not {ALIGN}-byte aligned"
            )));
        }
        if offset < prev_end {
            return Err(header(format!(
                "offset {offset} overlaps {prev}, which ends at {prev_end}"
            )));
        }
        if offset - prev_end >= ALIGN as u64 {
            return Err(header(format!(
                "offset {offset} leaves a gap of {} bytes after {prev} (ending at {prev_end}); \
                 padding must be shorter than {ALIGN} bytes",
                offset - prev_end
            )));
        }
        // offset < prev_end + 64 <= file_len + 64: no overflow.
        let end = offset + nbytes;
        if end > file_len {
            return Err(header(format!(
                "data {offset}..{end} extends past the end of the file ({file_len} bytes)"
            )));
        }
        check_zero_padding(bytes, prev_end as usize, offset as usize, name)?;
        tensors.push(TensorInfo {
            name: name.clone(),
            dtype: t.dtype.clone(),
            shape,
            offset: offset as usize,
            nbytes: nbytes as usize,
            crc32c: t.crc32c,
        });
        prev_end = end;
        prev = format!("tensor {name}");
    }

    // Every entry is a distinct model tensor, so if the model has more tensors than the table,
    // one of the first `table.len() + 1` positions is missing: this stops there.
    let model_order = (0..tensors::count(layers))
        .map(|k| {
            found.get(&k).copied().ok_or_else(|| {
                let name = tensors::name(k, layers);
                Error::Header(format!("tensor {name} is missing from the tensor table"))
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    if prev_end != file_len {
        return Err(Error::Header(format!(
            "{} bytes follow the end of the last tensor ({prev}, at {prev_end}); \
             it must end the file",
            file_len - prev_end
        )));
    }
    Ok((tensors, model_order))
}

fn check_zero_padding(bytes: &[u8], from: usize, to: usize, before: &str) -> Result<()> {
    match bytes[from..to].iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(k) => Err(Error::Header(format!(
            "padding byte at offset {} (before tensor {before}) is {:#04x}, must be 0",
            from + k,
            bytes[from + k]
        ))),
    }
}
