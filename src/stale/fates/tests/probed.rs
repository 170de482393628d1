//! The fates model over save text, for what the independent probes and
//! the differential run found: replies stopped after, the order of the
//! hooks, rewrites into what a packet had, what the host sends itself,
//! changes that hold nothing, and the packets the candidates must name.

use super::super::{judged, Found, Host};
use super::{found, found_on, opens, router};
use crate::stale::saved_table::parse as tables;

#[test]
fn a_witness_whose_reply_passes_after_is_chosen_and_a_stopped_reply_is_said() {
    // Both stale drops open; the live copy drops the replies from 8080.
    let stale = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A INPUT -p tcp -m tcp --dport 9090 -j DROP\nCOMMIT\n";
    let live = "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -p tcp -m tcp --sport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["filter"])[0]);
    assert!(witness.contains(" → any:9090, arriving for the host"), "{witness}");
    assert!(!witness.contains("its reply"), "{witness}");
    // Where every witness's reply is stopped after, that is said.
    let stale = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["filter"])[0]);
    assert!(witness.contains(" → any:8080, arriving for the host"), "{witness}");
    assert!(
        witness.ends_with("after: passes (no rule meets it), but its reply is dropped nft filter OUTPUT rule 1 DROP)"),
        "{witness}"
    );
}

#[test]
fn what_the_host_sends_itself_meets_input_after_a_stale_snat() {
    // Probe 3's first opening: back in by lo, the packet a stale SNAT
    // rewrote meets a live `--ctstate SNAT` drop.
    let stale = "*nat\n-A POSTROUTING -p udp -m udp --dport 443 -j SNAT --to-source 10.2.0.1\nCOMMIT\n";
    let live = "*filter\n:INPUT DROP [0:0]\n-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A INPUT -m conntrack --ctstate SNAT -j DROP\n-A INPUT -p udp -j ACCEPT\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.contains("udp 127.0.0.1 → 127.0.0.1:443, sent by the host"),
        "{witness}"
    );
}

#[test]
fn a_dnat_to_where_a_packet_goes_sets_no_dnat_state() {
    // Probe 3's second opening: the live DNAT rewrites nothing of a packet
    // to 10.2.0.2:9002, so `--ctstate DNAT` does not drop it; the reply of
    // what the stale SNAT rewrote is dropped, now only.
    let stale = "*nat\n-A POSTROUTING -p tcp -m tcp --dport 9002 -j SNAT --to-source 10.2.0.1\nCOMMIT\n";
    let live = "*nat\n-A PREROUTING -p tcp -m tcp --dport 9002 -j DNAT --to-destination 10.2.0.2:9002\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate SNAT -j DROP\n-A FORWARD -m conntrack --ctstate DNAT -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("the reply to tcp any → 10.2.0.2:9002, forwarded"),
        "{witness}"
    );
}

#[test]
fn a_packet_is_tried_in_each_order_of_the_contested_hooks() {
    // Probe 3's third opening: legacy first at PREROUTING (its DNAT binds,
    // the live MARK is skipped), nft first at POSTROUTING (its MASQUERADE
    // binds, the reply to the router's address is dropped in mangle).
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.2.0.2:8080\n-A POSTROUTING -p tcp -m tcp --dport 8080 -j SNAT --to-source 10.1.0.2\nCOMMIT\n";
    let live = "*nat\n-A PREROUTING -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x1/0xffffffff\n-A POSTROUTING -p tcp -m tcp --dport 8080 -m mark ! --mark 0x1 -j SNAT --to-source 10.2.0.1\nCOMMIT\n*mangle\n-A PREROUTING -d 10.2.0.1/32 -p tcp -m tcp --sport 8080 -j DROP\nCOMMIT\n";
    let said = found_on(stale, live, &["nat"], &router());
    let witness = opens(&said[0]);
    assert!(
        witness.contains("legacy first at PREROUTING, nft first at POSTROUTING"),
        "{witness}"
    );
}

#[test]
fn a_stale_redirect_is_a_change_that_holds_nothing() {
    let stale = "*nat\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -p tcp -m tcp --dport 22 -j DROP\nCOMMIT\n";
    let (found, changes, _) = judged(
        &tables(stale.as_bytes()),
        "legacy",
        &tables(live.as_bytes()),
        "nft",
        &["nat"],
        &router(),
    );
    assert_eq!(found, vec![Found::Nothing]);
    let change = changes[0].as_ref().expect("a change").to_string();
    assert!(change.starts_with("tcp any → 10.2.0.2:9999, forwarded"), "{change}");
    assert!(
        change.contains("now: passes legacy nat PREROUTING rule 1 DNAT --to-destination 10.2.0.2:8080"),
        "{change}"
    );
    assert!(
        change.contains("after: passes nft filter FORWARD policy ACCEPT"),
        "{change}"
    );
}

#[test]
fn a_packet_from_inside_an_excluded_prefix_is_tried() {
    // Probe 4's first: the live MARK spares 10.1.0.0/24, so from there the
    // stale DNAT's :8080 meets the live drop.
    let mark =
        "-A PREROUTING -d 10.9.9.9/32 ! -s 10.1.0.0/24 -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x4000/0x4000";
    let stale = format!("*nat\n{mark}\n-A PREROUTING -d 10.9.9.9/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n");
    let live = format!("*nat\n{mark}\n-A PREROUTING -d 10.9.9.9/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:80\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\n-A FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT\n-A FORWARD -d 10.2.0.2/32 -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n");
    let witness = opens(&found_on(&stale, &live, &["nat"], &router())[0]);
    assert!(witness.starts_with("tcp 10.1.0.0 → 10.9.9.9:80"), "{witness}");
}

#[test]
fn a_block_is_merged_with_what_its_callers_test() {
    let stale =
        "*nat\n-A PREROUTING -d 10.9.9.9/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n";
    let live = "*nat\n-A PREROUTING -d 10.9.9.9/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:80\nCOMMIT\n*filter\n:NP - [0:0]\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\n-A FORWARD -i rc -j NP\n-A NP -d 10.2.0.2/32 -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(witness.contains("forwarded in by rc"), "{witness}");
}

#[test]
fn stopped_now_and_unknown_after_cannot_be_told() {
    // Probe 4's second: the DNAT's packet is dropped now; without it, it
    // arrives for the host and meets a rule not modelled.
    let stale =
        "*nat\n-A PREROUTING -d 10.2.0.1/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:80\nCOMMIT\n";
    let live = "*filter\n-A INPUT -p tcp -m tcp --dport 80 -m conntrack --ctstate NEW --ctdir REPLY -j DROP\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\n-A FORWARD -d 10.2.0.2/32 -j DROP\nCOMMIT\n";
    let found = found_on(stale, live, &["nat"], &router());
    assert!(
        matches!(&found[0], Found::Undecided(said, _) if said.contains("is dropped now by")),
        "{found:?}"
    );
}

#[test]
fn a_recent_option_not_modelled_read_after_a_stale_write_cannot_be_told() {
    // Probe 4's third: `--hitcount` is not modelled; the entry the stale
    // copy wrote decides what the live check does.
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -m recent --set --name BAD --mask 255.255.255.255 --rsource -j RETURN\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\n-A FORWARD -p udp -m recent --rcheck --hitcount 2 --name BAD --mask 255.255.255.255 --rsource -j DROP\nCOMMIT\n";
    let found = found_on(stale, live, &["nat"], &router());
    assert!(
        matches!(&found[0], Found::Undecided(said, _) if said.contains("--hitcount 2")),
        "{found:?}"
    );
}

#[test]
fn a_reply_to_a_rewritten_source_is_tried_with_a_blocks_ports_alone() {
    // Probe 4's fourth: raw drops what comes back to the SNAT address from :80.
    let stale = "*nat\n-A POSTROUTING -o rs -j SNAT --to-source 10.2.0.1\nCOMMIT\n";
    let live = "*raw\n-A PREROUTING -d 10.2.0.1/32 -p tcp -m tcp --sport 80 -j DROP\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("the reply to tcp any → any:80, forwarded"),
        "{witness}"
    );
}

#[test]
fn neighbour_discovery_a_live_set_may_stop_makes_an_ipv6_witness_undecided() {
    // The differential's class: a live `--match-set ... src -j DROP` at
    // INPUT (members not read) may stop the client's advertisements.
    let stale = "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let live = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m set --match-set iptw-block6 src -j DROP\nCOMMIT\n";
    let found = found_on(stale, live, &["filter"], &Host::ipv6());
    assert!(
        matches!(&found[0], Found::Undecided(said, _) if said.contains("what `-A INPUT -m set --match-set iptw-block6 src -j DROP`")),
        "{found:?}"
    );
}

#[test]
fn a_list_entry_written_in_one_order_only_says_that_order() {
    // The differential's class: the stale `--set` runs only where legacy
    // is first at FORWARD (nft's DROP policy stops the packet before it
    // otherwise), so the witness is stopped in that order only.
    let stale = "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -p tcp -m tcp --dport 443 -m recent --set --name X --mask 255.255.255.255 --rsource\n-A FORWARD -p icmp -j ACCEPT\nCOMMIT\n";
    let live = "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -p icmp -j ACCEPT\n-A INPUT -p tcp -m tcp --dport 8080 -m recent --rcheck --name X --mask 255.255.255.255 --rsource -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["filter"], &router())[0]);
    assert!(witness.contains("any:8080, arriving for the host"), "{witness}");
    assert!(
        witness.contains("(now, legacy first at each hook: dropped"),
        "{witness}"
    );
}
