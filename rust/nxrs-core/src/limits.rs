//! The limits of a model (`docs/TRAINING.md` sections 1 and 15.1), for layer sizes and layer
//! objects alike: they bound what a configuration (and so a checkpoint header) can make nxrs
//! allocate.

/// Largest size of one layer (cells per sample of any activation).
pub const MAX_LAYER_SIZE: usize = 1 << 24;
/// Most parameter cells of all layers together.
pub const MAX_PARAMETERS: usize = 1 << 28;
/// Most layers: weight layers of an MLP, layers after `Input` of a list. Parameters alone would
/// allow 2^27 layers (of one unit each), and a checkpoint header's `sizes` list of that length
/// costs a gigabyte to hold before any tensor is read; the deepest MLPs trained in practice
/// have tens of layers. 4096 leaves two orders of magnitude of room and bounds a header's
/// `sizes` to 4097 numbers and its tensor table to `6 * 4096` entries, whatever the header's
/// length.
pub const MAX_LAYERS: usize = 4096;
