//! The first look: what each backend holds in each family, read once
//! before any lock and shared by everything that looks then (whether the
//! host's backend is certain, the showing, the removal's first "what is
//! stale"). The removal's later phases read afresh, on purpose: under the
//! xtables lock to judge, just before emptying, and after.

use super::find::{self, Finding};
use crate::family::Family;
use crate::mode::Mode;

/// The findings read so far, each read at most once.
#[derive(Default)]
pub struct Look {
    read: Vec<Finding>,
}

impl Look {
    /// What `backend` holds in `family`, read the first time it is asked.
    pub fn of(&mut self, backend: Mode, family: Family) -> &Finding {
        let at = match self
            .read
            .iter()
            .position(|f| f.backend == backend && f.family == family)
        {
            Some(at) => at,
            None => {
                self.read.push(find::find(backend, family));
                self.read.len() - 1
            }
        };
        &self.read[at]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A finding asked for twice is the first one, not a second reading.
    #[test]
    fn each_backend_and_family_is_read_once() {
        let mut look = Look::default();
        let mut first = look.of(Mode::Legacy, Family::Ipv4).clone();
        first.left.push(find::LeftTable {
            name: "marked".into(),
            why: "by this test".into(),
        });
        look.read[0] = first.clone();
        assert_eq!(*look.of(Mode::Legacy, Family::Ipv4), first);
        assert_eq!(look.read.len(), 1);
        look.of(Mode::Nft, Family::Ipv4);
        look.of(Mode::Legacy, Family::Ipv6);
        assert_eq!(look.read.len(), 3);
    }
}
