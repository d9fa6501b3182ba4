//! The names of an enum's values (`"adam"`, `"ieee"`, `"hw"`, ...): one table per enum, from one
//! macro. A crate-level utility (like `bounded`), so that the low modules (loss, math, backend)
//! use it without depending on `config`.

/// Defines a field-less enum with its name table: each variant is written once, with its
/// name. The enum gets `ALL` (every value), `NAMES` (their names, in the same order), `name`
/// and `from_name`; the names are what configurations, checkpoints, the command line and
/// messages use.
///
/// ```ignore
/// names! {
///     /// The loss.
///     pub enum Loss { CrossEntropy = "cross_entropy", Mse = "mse" }
/// }
/// ```
macro_rules! names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $ty:ident {
            $($(#[$vmeta:meta])* $variant:ident = $name:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $ty {
            $($(#[$vmeta])* $variant),+
        }

        impl $ty {
            /// Every value, in the order of `NAMES`.
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];

            /// The name of every value, in the order of `ALL`.
            pub const NAMES: [&'static str; [$($name),+].len()] = [$($name),+];

            /// The name in configurations, checkpoints and messages.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }

            /// The value called `name`, if there is one.
            pub fn from_name(name: &str) -> Option<$ty> {
                match name {
                    $($name => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

pub(crate) use names;
