//! The first look: what each backend holds in each family, read once
//! before any lock and shared by everything that looks then (whether the
//! host's backend is certain, the showing, the removal's first "what is
//! stale"). The removal's later phases read afresh, on purpose: under the
//! xtables lock to judge, just before emptying, and after.

use super::find::{self, Finding};
use crate::family::Family;
use crate::mode::Mode;

/// The findings read so far, each read at most once.
pub struct Look {
    read: Vec<Finding>,
    /// How a finding is read: [`find::find`], the kernel's.
    reader: fn(Mode, Family) -> Finding,
}

impl Default for Look {
    fn default() -> Self {
        Look {
            read: Vec::new(),
            reader: find::find,
        }
    }
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
                self.read.push((self.reader)(backend, family));
                self.read.len() - 1
            }
        };
        &self.read[at]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static READINGS: AtomicUsize = AtomicUsize::new(0);

    /// A reading of nothing, counted, with the reading's number as its
    /// only (left) table: which reading a finding came from.
    fn counted(backend: Mode, family: Family) -> Finding {
        let number = READINGS.fetch_add(1, Ordering::SeqCst);
        let mut finding = Finding::empty(backend, family);
        finding.left.push(find::LeftTable {
            name: number.to_string(),
            why: "reading".into(),
        });
        finding
    }

    /// A finding asked for again is the first reading, in any order of
    /// asking; each backend and family is read once.
    #[test]
    fn each_backend_and_family_is_read_once() {
        let mut look = Look {
            read: Vec::new(),
            reader: counted,
        };
        let asked = [
            (Mode::Legacy, Family::Ipv4),
            (Mode::Nft, Family::Ipv4),
            (Mode::Legacy, Family::Ipv4),
            (Mode::Legacy, Family::Ipv6),
            (Mode::Nft, Family::Ipv4),
            (Mode::Nft, Family::Ipv6),
            (Mode::Legacy, Family::Ipv6),
        ];
        let numbers: Vec<String> = asked
            .iter()
            .map(|&(backend, family)| {
                let finding = look.of(backend, family);
                assert_eq!((finding.backend, finding.family), (backend, family));
                finding.left[0].name.clone()
            })
            .collect();
        assert_eq!(numbers, ["0", "1", "0", "2", "1", "3", "2"]);
        assert_eq!(READINGS.load(Ordering::SeqCst), 4);
    }
}
