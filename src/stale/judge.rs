//! One verdict per family of the stale backend: its tables hand packets
//! and state to each other (raw, mangle, nat, filter, security: marks,
//! conntrack entries, DNAT), so they are emptied together, or every one of
//! them is left with the reasons.
//!
//! A family goes only when each of its stale tables' backups restores
//! exactly ([`super::proof`]) and, unless `--allow-opening`, the host's
//! backend holds a twin of everything in each that is not on the allowlist
//! ([`super::opening`]). One table that fails either keeps all of them:
//! that table says why, the others that they are left with it.

use super::find;
use super::opening;
use super::proof::Verdicts;
use crate::family::Family;
use crate::mode::Mode;
use crate::save_text;
use std::path::Path;

/// Per table of `names` in the stale `save`: why emptying it is not proven
/// safe for the host that `live` filters (None: it is, or `allow_opening`).
pub fn held_back(
    save: &[u8],
    live: Mode,
    family: Family,
    names: &[&str],
    allow_opening: bool,
    private_lock: &Path,
) -> Result<Vec<Option<String>>, String> {
    if allow_opening {
        return Ok(vec![None; names.len()]);
    }
    opening::openings(save, live, family, names, private_lock)
        .map(|(opens, _, _)| opens.into_iter().map(|open| open.map(|o| o.why)).collect())
        .map_err(|why| format!("whether removing it is safe is unknown: {why}; nothing removed"))
}

/// Why a table with no reason of its own is left: the tables of its
/// family that have one (`held`, by name).
fn left_with(held: &[&str]) -> String {
    format!(
        "left with the {} table{} of its family (one family's tables are emptied together or not at all: they hand packets and state to each other)",
        held.join(", "),
        if held.len() == 1 { "" } else { "s" }
    )
}

/// A proof's verdicts for the tables `names` of one family, judged as one:
/// a table not proven safe (`opens`) fails ("... (--allow-opening
/// removes it anyway)"), and when any table fails, every other one is left
/// with it. The backup is cut to the tables still to be emptied (none,
/// then): an undo never replaces a table the removal left alone.
pub fn as_one((save, mut verdicts): Verdicts, opens: Vec<Option<String>>, names: &[&str]) -> Verdicts {
    for (verdict, open) in verdicts.iter_mut().zip(opens) {
        if let (Ok(()), Some(why)) = (&verdict, open) {
            *verdict = Err(format!(
                "{why} (`iptables-wrapper stale` shows its chains side by side; --allow-opening removes it anyway)"
            ));
        }
    }
    let held: Vec<&str> = names
        .iter()
        .zip(&verdicts)
        .filter(|(_, verdict)| verdict.is_err())
        .map(|(name, _)| *name)
        .collect();
    if held.is_empty() {
        return (save_text::sections(&save, names), verdicts);
    }
    for verdict in verdicts.iter_mut().filter(|v| v.is_ok()) {
        *verdict = Err(left_with(&held));
    }
    (Vec::new(), verdicts)
}

/// The verdicts of a family some of whose tables (`unsaved`, with why)
/// have no save, so no backup: every table is left, as [`as_one`] leaves
/// them.
pub fn unsaved(unsaved: &[find::LeftTable], names: &[&str]) -> Verdicts {
    let verdicts = names
        .iter()
        .map(|name| match unsaved.iter().find(|t| t.name == *name) {
            Some(table) => Err(table.why.clone()),
            None => Ok(()),
        })
        .collect();
    as_one((Vec::new(), verdicts), vec![None; names.len()], names)
}

/// Per table of one family, what showing says of removing it: why it
/// is not proven safe (Some), or that it is (None), or why that is
/// unknown (Err); judged as one, as [`as_one`] does: a table with nothing
/// of its own is left with the tables that are held (unknown, where
/// whether one is safe is).
pub fn shown_as_one(opens: Vec<Result<Option<String>, String>>, names: &[&str]) -> Vec<Result<Option<String>, String>> {
    let held: Vec<&str> = names
        .iter()
        .zip(&opens)
        .filter(|(_, open)| !matches!(open, Ok(None)))
        .map(|(name, _)| *name)
        .collect();
    if held.is_empty() {
        return opens;
    }
    let unknown = opens.iter().any(Result::is_err);
    opens
        .into_iter()
        .map(|open| match open {
            Ok(None) if unknown => Err(left_with(&held)),
            Ok(None) => Ok(Some(left_with(&held))),
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{as_one, shown_as_one};

    #[test]
    fn one_table_held_holds_its_whole_family() {
        let save = b"*mangle\n-A PREROUTING -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n";
        let names = ["mangle", "filter"];
        let (backup, verdicts) = as_one(
            (save.to_vec(), vec![Ok(()), Ok(())]),
            vec![Some("removing it may open the host: x".into()), None],
            &names,
        );
        assert!(backup.is_empty());
        assert!(verdicts[0]
            .as_ref()
            .unwrap_err()
            .contains("--allow-opening removes it anyway"));
        assert!(verdicts[1].as_ref().unwrap_err().contains("left with the mangle table"));
        // A backup that does not prove holds it likewise.
        let (_, verdicts) = as_one(
            (save.to_vec(), vec![Err("does not restore".into()), Ok(())]),
            vec![None, None],
            &names,
        );
        assert!(verdicts[1].is_err());
        // Nothing held: all go, with the whole backup.
        let (backup, verdicts) = as_one((save.to_vec(), vec![Ok(()), Ok(())]), vec![None, None], &names);
        assert!(verdicts.iter().all(Result::is_ok));
        assert_eq!(backup, save);
        // Shown: left with a held table, or unknown beside an unknown one.
        let shown = shown_as_one(vec![Ok(None), Ok(Some("x".into()))], &names);
        assert!(shown[0]
            .clone()
            .unwrap()
            .unwrap()
            .contains("left with the filter table"));
        let shown = shown_as_one(vec![Ok(None), Err("unknown".into())], &names);
        assert!(shown[0].clone().unwrap_err().contains("left with the filter table"));
    }
}
