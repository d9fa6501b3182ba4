//! The tensors of a model in checkpoint order ([`crate::TrainState::tensors`]): names, shapes,
//! and the position of a name, computed arithmetically.
//!
//! A reader of a hostile file must not build the list of a model's tensors before it knows the
//! model is as small as the file: a header of a few megabytes can name an MLP of millions of
//! layers. Computing each tensor from its position (and a position from a name) lets the reader
//! check the file's table entry by entry, with work bounded by the table's length.
//!
//! Order, for `L` layers: parameters `W1 b1 ... WL bL` (positions `0..2L`), then for each
//! parameter `p` its moments `m<p> v<p>` (positions `2L + 2p` and `2L + 2p + 1`).

use crate::mlp::Mlp;

/// The most dimensions a tensor has: weights are matrices, biases and moments at most that.
pub(crate) const MAX_RANK: usize = 2;

/// Number of tensors of a model with `layers` weight layers.
pub(crate) fn count(layers: usize) -> usize {
    6 * layers
}

/// Name of the tensor at position `k` (`k < count(layers)`).
pub(crate) fn name(k: usize, layers: usize) -> String {
    let param = |p: usize| format!("{}{}", if p % 2 == 0 { "W" } else { "b" }, p / 2 + 1);
    match k.checked_sub(2 * layers) {
        None => param(k),
        Some(j) => format!("{}{}", if j % 2 == 0 { "m" } else { "v" }, param(j / 2)),
    }
}

/// Position of the tensor called `name` in a model of `layers` layers, if it has one. Only the
/// canonical spelling is accepted (`W1`, not `W01` or `W+1`).
pub(crate) fn position(name: &str, layers: usize) -> Option<usize> {
    let (moment, rest) = match name.as_bytes().first()? {
        b'm' => (Some(0), &name[1..]),
        b'v' => (Some(1), &name[1..]),
        _ => (None, name),
    };
    let (is_bias, digits) = match rest.as_bytes().first()? {
        b'W' => (0, &rest[1..]),
        b'b' => (1, &rest[1..]),
        _ => return None,
    };
    let canonical = !digits.is_empty()
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    if !canonical {
        return None;
    }
    let layer: usize = digits.parse().ok()?;
    if layer > layers {
        return None;
    }
    let param = 2 * (layer - 1) + is_bias;
    Some(match moment {
        None => param,
        Some(which) => 2 * layers + 2 * param + which,
    })
}

/// Shape of the tensor at position `k` for layer sizes `sizes`: `W<l>` is `[n_l, n_(l-1)]`,
/// `b<l>` is `[n_l]`, a moment has its parameter's shape.
pub(crate) fn shape(k: usize, sizes: &[usize]) -> Vec<usize> {
    let layers = sizes.len() - 1;
    let param = k.checked_sub(2 * layers).map_or(k, |j| j / 2);
    let l = param / 2 + 1;
    if param % 2 == 0 {
        vec![sizes[l], sizes[l - 1]]
    } else {
        vec![sizes[l]]
    }
}

/// All tensors of a model in checkpoint order, with their shapes (the seed model:
/// `W1[10, 6] b1[10] W2[4, 10] b2[4] mW1[10, 6] vW1[10, 6] mb1[10] ...`).
pub fn model_tensors(mlp: &Mlp) -> Vec<(String, Vec<usize>)> {
    (0..count(mlp.layers()))
        .map(|k| (name(k, mlp.layers()), shape(k, mlp.sizes())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trainer::{tensor_names, TrainState};

    #[test]
    fn agrees_with_the_trainers_order_and_shapes() {
        for sizes in [
            vec![6, 10, 4],
            vec![3, 2],
            vec![5, 4, 3, 2, 7, 1, 9, 2, 3, 4, 5, 6],
        ] {
            let mlp = Mlp::new(sizes).unwrap();
            let specs = model_tensors(&mlp);
            let names: Vec<String> = specs.iter().map(|(n, _)| n.clone()).collect();
            assert_eq!(names, tensor_names(2 * mlp.layers()));
            let state = TrainState::fresh(mlp.init_params(1));
            let lens: Vec<usize> = specs.iter().map(|(_, s)| s.iter().product()).collect();
            assert_eq!(lens, state.tensor_lens());
            for (k, (name, _)) in specs.iter().enumerate() {
                assert_eq!(position(name, mlp.layers()), Some(k), "{name}");
            }
        }
        let text: Vec<String> = model_tensors(&Mlp::seed_model())
            .iter()
            .map(|(n, s)| format!("{n}{s:?}"))
            .collect();
        assert_eq!(
            text.join(" "),
            "W1[10, 6] b1[10] W2[4, 10] b2[4] mW1[10, 6] vW1[10, 6] mb1[10] vb1[10] \
             mW2[4, 10] vW2[4, 10] mb2[4] vb2[4]"
        );
    }

    #[test]
    fn only_canonical_names_of_the_model_have_a_position() {
        for bad in [
            "",
            "W",
            "W0",
            "W01",
            "W+1",
            "W3",
            "x1",
            "mm1",
            "mW",
            "vx1",
            "W1 ",
            "w1",
            "W١",
            "W99999999999999999999999",
        ] {
            assert_eq!(position(bad, 2), None, "{bad:?}");
        }
        assert_eq!(position("vb2", 2), Some(11));
    }
}
