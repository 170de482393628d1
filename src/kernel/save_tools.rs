//! The fallback when the kernel refuses a direct query (no CAP_NET_ADMIN,
//! seccomp, an old kernel): run the backend's own save tool and read its
//! output line by line. `*-save` without `-t` only lists existing tables, so
//! this creates nothing either.

use crate::backend;
use crate::command::WrappedCommand;
use crate::family::Family;
use crate::kernel::HINT_CHAINS;
use crate::mode::Mode;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// What one save tool printed, reduced to what the decision needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedRules {
    /// Hint chains declared in the mangle table.
    pub hint_chains: Vec<&'static str>,
    /// `-A` lines.
    pub rules: u64,
}

/// Runs `<family>-save` of `mode` and summarises its output.
pub fn read(mode: Mode, family: Family) -> Result<SavedRules, String> {
    let tool = backend::locate(&WrappedCommand::save_tool(family), mode).map_err(|e| e.to_string())?;
    let mut child = Command::new(&tool.path)
        .arg0(&tool.argv0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", tool.path.display()))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let summary = summarise(BufReader::new(stdout));
    let status = child.wait().map_err(|e| e.to_string())?;
    match summary {
        Ok(summary) if status.success() => Ok(summary),
        Ok(_) => Err(format!("{} {}", tool.path.display(), status)),
        Err(e) => Err(format!("reading {}: {e}", tool.path.display())),
    }
}

/// Counts `-A` lines and spots hint chains in `*mangle`, streaming. Lines
/// are bytes, not text: a rule comment in any encoding (say Latin-1 `0xE9`)
/// is just counted.
fn summarise(mut output: impl BufRead) -> std::io::Result<SavedRules> {
    let mut summary = SavedRules::default();
    let mut in_mangle = false;
    let mut line = Vec::new();
    loop {
        line.clear();
        if output.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let line = line.strip_suffix(b"\n").unwrap_or(&line);
        if let Some(table) = line.strip_prefix(b"*") {
            in_mangle = table == b"mangle";
        } else if line.starts_with(b"-A ") {
            summary.rules += 1;
        } else if let Some(declaration) = line.strip_prefix(b":") {
            let chain = declaration.split(u8::is_ascii_whitespace).next().unwrap_or_default();
            if in_mangle {
                if let Some(hint) = HINT_CHAINS.iter().find(|h| h.as_bytes() == chain) {
                    summary.hint_chains.push(hint);
                }
            }
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_a_save() {
        let save = "# Generated\n*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n*filter\n:KUBE-KUBELET-CANARY - [0:0]\n-A INPUT -j ACCEPT\n-A FORWARD -m comment --comment \"-A x\" -j DROP\nCOMMIT\n";
        let summary = summarise(save.as_bytes()).unwrap();
        assert_eq!(
            summary,
            SavedRules {
                hint_chains: vec!["KUBE-IPTABLES-HINT"],
                rules: 2
            }
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_counted() {
        let save = b"*mangle\n:KUBE-PROXY-CANARY - [0:0]\n-A INPUT -m comment --comment caf\xe9 -j ACCEPT\nCOMMIT\n";
        let summary = summarise(&save[..]).unwrap();
        assert_eq!(summary.rules, 1);
        assert_eq!(summary.hint_chains, vec!["KUBE-PROXY-CANARY"]);
    }
}
