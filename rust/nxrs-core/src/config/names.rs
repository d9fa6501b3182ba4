//! The names of a setting's values (`"adam"`, `"ieee"`, ...), one table per enum.

/// Gives a field-less enum its name table: `ALL` (every value), `NAMES` (their names, in the
/// same order), `name` and `from_name`. The names are what configurations, checkpoints, the
/// command line and messages use, so each is written once, here:
///
/// ```ignore
/// names!(Loss { CrossEntropy = "cross_entropy", Mse = "mse" });
/// ```
///
/// A variant left out of the list does not compile (`name`'s match is exhaustive).
macro_rules! names {
    ($ty:ident { $($variant:ident = $name:literal),+ $(,)? }) => {
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
