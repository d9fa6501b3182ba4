//! What a user asks for ([`BackendChoice`]: `auto`, `hw` or `soft`) and the backend it resolves
//! to in this process.

use super::selfcheck::{hardware, Unavailable};
use super::Backend;

crate::names::names! {
    /// What a user asks for: a backend, or `Auto` (the hardware where [`hardware`] allows it).
    #[derive(Default)]
    pub enum BackendChoice {
        #[default]
        Auto = "auto",
        Hw = "hw",
        Soft = "soft",
    }
}

/// A resolved choice: the backend, and the self-check's failure when `Auto` fell back to soft
/// because of it (to show as a warning; a target without a guard falls back silently).
pub type Resolved = (Backend, Option<&'static str>);

impl BackendChoice {
    /// The backend this choice gives in this process. `Hw` where the hardware is not available
    /// is an `Error::Config` saying why.
    pub fn resolve(self) -> crate::Result<Resolved> {
        self.resolve_with(hardware())
    }

    /// [`BackendChoice::resolve`] given the hardware's availability.
    pub fn resolve_with(
        self,
        hardware: Result<(), &'static Unavailable>,
    ) -> crate::Result<Resolved> {
        match (self, hardware) {
            (BackendChoice::Soft, _) => Ok((Backend::Soft, None)),
            (BackendChoice::Hw | BackendChoice::Auto, Ok(())) => Ok((Backend::Hw, None)),
            (BackendChoice::Hw, Err(why)) => Err(crate::Error::Config(format!(
                "backend='hw' is not available: {}",
                why.message()
            ))),
            (BackendChoice::Auto, Err(Unavailable::Target(_))) => Ok((Backend::Soft, None)),
            (BackendChoice::Auto, Err(why @ (Unavailable::SelfCheck(_) | Unavailable::Isa(_)))) => {
                Ok((Backend::Soft, Some(why.message())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;

    #[test]
    fn auto_falls_back_to_soft_with_the_reason() {
        static FAILED: Unavailable = Unavailable::SelfCheck(String::new());
        let failed = Err(&FAILED);
        assert_eq!(
            BackendChoice::Auto.resolve_with(failed).unwrap(),
            (Backend::Soft, Some(""))
        );
        assert!(matches!(
            BackendChoice::Hw.resolve_with(failed),
            Err(crate::Error::Config(m)) if m.starts_with("backend='hw' is not available")
        ));
        assert_eq!(
            BackendChoice::Soft.resolve_with(failed).unwrap(),
            (Backend::Soft, None)
        );
        assert_eq!(
            BackendChoice::Auto.resolve_with(Ok(())).unwrap(),
            (Backend::Hw, None)
        );
    }
}
