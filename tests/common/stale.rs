//! Helpers of the `stale` tests: running it, reading its output, and what
//! each backend holds.

use super::Node;
use super::OutputWithin as _;
use std::path::PathBuf;
use std::process::Output;

pub fn stale(node: &Node, args: &[&str]) -> Output {
    node.wrapper().arg("stale").args(args).output_within_limit().unwrap()
}

/// `stale` with `IPTABLES_MODE=nft`.
pub fn stale_by_override(node: &Node, args: &[&str]) -> Output {
    node.wrapper()
        .env("IPTABLES_MODE", "nft")
        .arg("stale")
        .args(args)
        .output_within_limit()
        .unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

/// Both families' legacy saves, without the header lines.
pub fn legacy_saves(node: &Node) -> String {
    without_headers(&node.sh("iptables-legacy-save; ip6tables-legacy-save"))
}

pub fn nft_ruleset(node: &Node) -> String {
    node.sh("nft list ruleset")
}

/// A save without its chains' counters and its `#` headers (they move
/// between two saves of the same rules).
pub fn uncounted(save: &str) -> String {
    use iptables_wrapper::save_text::{line, Line};
    without_headers(save)
        .lines()
        .map(|text| match line(text.as_bytes()) {
            Line::Chain { name, policy } => {
                format!(
                    ":{} {}\n",
                    String::from_utf8_lossy(name),
                    String::from_utf8_lossy(policy)
                )
            }
            _ => format!("{text}\n"),
        })
        .collect()
}

pub fn without_headers(save: &str) -> String {
    save.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The backup directory a removal printed.
pub fn backup_dir_of(out: &Output) -> PathBuf {
    let text = stdout(out);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("backup: "))
        .unwrap_or_else(|| panic!("no backup line: {text}"));
    PathBuf::from(line)
}

/// Sends one UDP datagram of `size` bytes to 10.9.0.1:`port` (the node)
/// from a neighbour one hop away whose link's MTU is `mtu`: a datagram
/// larger than it arrives in fragments.
pub fn datagram_from_neighbour(node: &Node, size: usize, port: u16, mtu: u16) {
    node.sh(&format!(
        "unshare -n sleep 30 & c=$!
sleep 0.3
ip link add vh type veth peer name vc
ip link set vc netns $c
ip addr add 10.9.0.1/24 dev vh
ip link set vh up
nsenter -t $c -n sh -ec 'ip link set lo up; ip addr add 10.9.0.2/24 dev vc; ip link set vc mtu {mtu}; ip link set vc up'
sleep 0.3
nsenter -t $c -n bash -c 'printf \"%{size}s\" x > /dev/udp/10.9.0.1/{port}'
sleep 0.3
kill $c
wait $c || true
ip link del vh 2>/dev/null || true"
    ));
}

/// The packet counter of the first rule of iptables-nft's `table`
/// `chain` whose listing holds `marker`.
pub fn nft_rule_packets(node: &Node, table: &str, chain: &str, marker: &str) -> u64 {
    let listed = node.sh(&format!("iptables-nft -t {table} -L {chain} -v -x -n"));
    let line = listed
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no rule holding {marker} in {table} {chain}: {listed}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// How many packets the live rule `iptables-nft -t mangle -A PREROUTING
/// -p udp -m length --length 1000:65535 -j DROP` counts when a client one
/// hop away (MTU 576) sends one 1,200-byte UDP datagram: 1 while the
/// kernel defragments, 0 once it sees the three fragments alone.
pub fn whole_datagrams_counted(node: &Node) -> u64 {
    let before = nft_rule_packets(node, "mangle", "PREROUTING", "length");
    datagram_from_neighbour(node, 1200, 5000, 576);
    nft_rule_packets(node, "mangle", "PREROUTING", "length") - before
}
