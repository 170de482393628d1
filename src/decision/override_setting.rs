//! The first source: the `IPTABLES_MODE` override, from the environment or
//! the settings directory (see `settings`). Set to `nft` or `legacy`, it
//! decides, whatever the host and the kernel say; `auto` or unset leaves the
//! decision to the sources after it.
//!
//! What it cannot see: whether the backend it names is in the kernel (the
//! presence read warns about that, see `presence`), and an invalid value,
//! which `decide` refuses before any source is read.

use super::collector::Collector;
use super::evidence::{Evidence, Finding, Source};
use crate::mode::OVERRIDE_VAR;
use crate::settings::{self, Origin};

/// Records the override and decides by it, when it names a mode.
pub(super) fn read_override(collector: &mut Collector) {
    let settings = settings::current();
    let Some(mode) = settings.mode else { return };
    let setting = settings.get(OVERRIDE_VAR);
    let value = setting.value.as_deref().unwrap_or_default().to_string_lossy();
    let (location, method, reason) = match &setting.origin {
        Origin::File { path, .. } => (
            path.display().to_string(),
            "settings file",
            format!("pinned by the settings file {}: {value}", setting.origin),
        ),
        _ => (
            OVERRIDE_VAR.to_string(),
            "environment",
            format!("overridden by environment variable {OVERRIDE_VAR}={value}"),
        ),
    };
    collector.add(|| Evidence {
        source: Source::Override,
        location,
        finding: Finding::Known(value.to_string()),
        method: method.into(),
        points_to: Some(mode),
    });
    collector.decide(mode, Source::Override, reason);
}
