//! The first source: the `IPTABLES_MODE` override, from the environment or
//! the settings directory (see `settings`). Set to `nft` or `legacy`, it
//! decides, whatever the host and the kernel say; `auto` or unset leaves the
//! decision to the sources after it.
//!
//! What it cannot see: whether the backend it names is in the kernel (the
//! presence read warns about that, see `presence`), and an invalid value,
//! which `decide` refuses before any source is read.

use super::collector::Collector;
use super::evidence::{Evidence, Finding};
use super::host::Host;
use super::reason::Reason;
use super::source::Source;
use crate::escape::Shown as _;
use crate::mode::OVERRIDE_VAR;
use crate::settings::Origin;

/// Records the override and decides by it, when it names a mode.
pub(super) fn read_override(collector: &mut Collector, host: &impl Host) {
    let settings = host.settings();
    let Some(mode) = settings.mode else { return };
    let setting = settings.get(OVERRIDE_VAR);
    let value = setting.value.as_deref().unwrap_or_default().to_string_lossy();
    collector.add(|| {
        let (location, method) = match &setting.origin {
            Origin::File { path, .. } => (path.shown().to_string(), "settings file"),
            _ => (OVERRIDE_VAR.to_string(), "environment"),
        };
        Evidence {
            source: Source::Override,
            location,
            finding: Finding::Known(value.to_string()),
            method: method.into(),
            points_to: Some(mode),
        }
    });
    let reason = Reason::Override {
        value: value.into_owned(),
        origin: setting.origin.clone(),
    };
    collector.decide(mode, Source::Override, reason);
}
