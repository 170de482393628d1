//! The nft half of a removal: each stale nft family read, saved and
//! judged at one generation, then emptied, every family that may go, in one
//! transaction committed only at that generation; when anything committed
//! meanwhile, judged, backed up and tried again.

use super::{BeforeEmptying, NotRecorded, Proven, Removing};
use crate::family::Family;
use crate::kernel::nft::{Emptied, NftSocket, NftTableImage};
use crate::mode::Mode;
use crate::stale::find::{self, Finding};
use crate::stale::judge;
use crate::stale::proof;
use crate::stale::removal_report::Removal;
use crate::stale::show;
use crate::stale::signals;
use std::collections::HashSet;
use std::time::Duration;

/// Attempts at the nft removal while the generation keeps moving.
const NFT_TRIES: usize = 5;
/// The wait before the next nft attempt, times the attempts so far.
const NFT_BACKOFF: Duration = Duration::from_millis(100);

/// One nft attempt: the generation its proofs were read at, and the proofs.
type NftAttempt = Option<(u32, Vec<Proven>)>;

impl Removing<'_> {
    /// One nft attempt: each family's stale tables read afresh, their
    /// images and the save all at one generation (returned with the
    /// verdicts); Ok(None) when the generation moved while reading. An
    /// error while it moved (a dump the kernel kept interrupting, a table
    /// gone) is the ruleset moving too, tried again like it: only an error
    /// at a steady generation is a table's reason.
    pub(super) fn judge_nft(&self, socket: &NftSocket, families: &[Family]) -> Result<NftAttempt, String> {
        let generation = socket
            .generation()
            .map_err(|e| format!("nf_tables cannot be read: {e}"))?;
        match self.judge_nft_at(socket, families, generation) {
            Err(_) if socket.generation().is_ok_and(|now| now != generation) => Ok(None),
            judged => judged,
        }
    }

    /// [`Self::judge_nft`] from `generation`, read before.
    fn judge_nft_at(&self, socket: &NftSocket, families: &[Family], generation: u32) -> Result<NftAttempt, String> {
        let mut read = Vec::new();
        for &family in families {
            // The finding saves each stale table (its notes say whether it is
            // iptables-nft's); the generation check below covers all three.
            let (finding, save) = find::find_saved(Mode::Nft, family);
            if let Some(why) = finding.unknown() {
                return Err(why.to_string());
            }
            if finding.tables().is_empty() {
                continue; // emptied meanwhile (by another removal)
            }
            let names: Vec<&'static str> = finding.tables().iter().map(|t| t.name).collect();
            let Some((images, at)) = proof::nft_images(socket, family, &names)? else {
                return Ok(None);
            };
            if at != generation {
                return Ok(None);
            }
            read.push((finding, names, images, save));
        }
        if socket
            .generation()
            .map_err(|e| format!("nf_tables cannot be read: {e}"))?
            != generation
        {
            return Ok(None);
        }
        let mut judged = Vec::new();
        for (finding, names, images, save) in read {
            let family = finding.family;
            let (save, verdicts) = if finding.unsaved().is_empty() {
                self.judge(Mode::Nft, family, &save, &names, || {
                    proof::prove_nft("the backup", family, &save, &names, &images, &self.private_lock)
                })?
            } else {
                judge::unsaved(finding.unsaved(), &names)
            };
            judged.push(Proven {
                finding,
                save,
                verdicts,
                images,
                legacy_read: Vec::new(),
            });
        }
        Ok(Some((generation, judged)))
    }

    /// Empties each nft family that may go in one transaction at the
    /// generation it was judged at; when anything committed meanwhile,
    /// waits, judges, backs up and tries again, [`NFT_TRIES`] attempts at
    /// most. `before_emptying` has the record name each attempt's tables
    /// before it empties them; Err: it stopped the removal before anything
    /// was emptied.
    pub(super) fn empty_nft(
        &self,
        socket: &NftSocket,
        nft_before: &[&Finding],
        mut attempt_read: Result<NftAttempt, String>,
        mut written: HashSet<String>,
        removal: &mut Removal,
        before_emptying: &mut BeforeEmptying,
    ) -> Result<(), String> {
        let nft: Vec<Family> = nft_before.iter().map(|f| f.family).collect();
        // What each failure names: the tables of the last attempt read, at
        // first those found before the removal.
        let mut last_findings: Vec<Finding> = nft_before.iter().map(|&f| f.clone()).collect();
        let mut read_steady = false;
        for attempt in 1..=NFT_TRIES {
            let (generation, judged) = match attempt_read {
                Err(why) => {
                    removal.fail_all(&last_findings.iter().collect::<Vec<_>>(), &why);
                    return Ok(());
                }
                Ok(None) => {
                    std::thread::sleep(NFT_BACKOFF * attempt as u32);
                    attempt_read = self.judge_nft(socket, &nft);
                    continue;
                }
                Ok(Some(read)) => read,
            };
            read_steady = true;
            if attempt > 1 {
                for one in &judged {
                    if let Err(e) = self.back_up(one, &mut written, removal) {
                        removal.fail_all(
                            &to_fail(&judged),
                            &format!("backing up again: {e}; nothing removed from nft"),
                        );
                        return Ok(());
                    }
                }
            }
            let to_empty: Vec<(Family, &str, &NftTableImage)> = judged
                .iter()
                .flat_map(|p| {
                    p.proven_tables()
                        .map(move |(index, table)| (p.finding.family, table.name, &p.images[index]))
                })
                .collect();
            if !to_empty.is_empty() {
                match before_emptying(&judged, removal) {
                    Ok(()) => {}
                    Err(NotRecorded::Stop(why)) => return Err(why),
                    Err(NotRecorded::Kept(why)) => {
                        removal.fail_all(&to_fail(&judged), &format!("{why}; nothing removed from nft"));
                        return Ok(());
                    }
                }
            }
            match socket.empty_tables(generation, &to_empty) {
                Ok(Emptied::Done) => {
                    signals::reached("emptied:nft");
                    for proven in &judged {
                        removal.record_verdicts(&proven.finding, &proven.verdicts);
                        for (_, table) in proven.proven_tables() {
                            removal.emptied.push((
                                (Mode::Nft, proven.finding.family, table.name),
                                show::table_summary(table),
                            ));
                        }
                    }
                    return Ok(());
                }
                Ok(Emptied::GenerationMoved) => {
                    // Writers come in bursts (a sync, a restore): let one end.
                    std::thread::sleep(NFT_BACKOFF * attempt as u32);
                    last_findings = judged.into_iter().map(|p| p.finding).collect();
                    attempt_read = self.judge_nft(socket, &nft);
                }
                Err(e) => {
                    removal.fail_all(&to_fail(&judged), &format!("emptying: {e}"));
                    return Ok(());
                }
            }
        }
        if let Ok(Some((_, judged))) = &attempt_read {
            last_findings = judged.iter().map(|p| p.finding.clone()).collect();
        }
        let kept_changing = if read_steady {
            "between the backup and the removal (another program keeps committing)"
        } else {
            "while it was being read (another program keeps committing), so no backup could be read at one generation and proven"
        };
        let why = format!(
            "gave up after {NFT_TRIES} attempts: in each, the nf_tables ruleset changed {kept_changing}; nothing removed from nft; run `iptables-wrapper stale --remove` again when writers are quiet"
        );
        removal.fail_all(&last_findings.iter().collect::<Vec<_>>(), &why);
        Ok(())
    }
}

/// The findings of proofs, to be left with a reason.
fn to_fail(proven: &[Proven]) -> Vec<&Finding> {
    proven.iter().map(|p| &p.finding).collect()
}
