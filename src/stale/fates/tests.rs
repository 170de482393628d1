//! The fates model over save text: each known way a removal opened a flow, a witness
//! with the rules that decide it, and the pairs that open nothing.

use super::{judged, Found, Host};
use crate::stale::saved_table::parse as tables;

fn found(stale: &str, live: &str, names: &[&str]) -> Vec<Found> {
    found_on(stale, live, names, &Host::unread())
}

/// [`found`] on a host with the addresses of the packet tests' router.
fn found_on(stale: &str, live: &str, names: &[&str], host: &Host) -> Vec<Found> {
    judged(
        &tables(stale.as_bytes()),
        "legacy",
        &tables(live.as_bytes()),
        "nft",
        names,
        host,
    )
    .0
}

fn router() -> Host {
    Host::with(&["10.1.0.1", "10.2.0.1"])
}

fn opens(found: &Found) -> String {
    match found {
        Found::Opens(witness) => witness.to_string(),
        other => panic!("no witness: {other:?}"),
    }
}

#[test]
fn a_stale_nat_mark_read_by_a_live_drop_opens() {
    let stale = "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x8000/0x8000\nCOMMIT\n";
    let live = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m mark --mark 0x8000/0x8000 -j DROP\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n";
    let said = found(stale, live, &["nat"]);
    let witness = opens(&said[0]);
    assert!(
        witness.starts_with("tcp any → any:8080, arriving for the host"),
        "{witness}"
    );
    assert!(
        witness.contains("now: dropped legacy nat PREROUTING rule 1 MARK --set-xmark 0x8000/0x8000 then nft filter INPUT rule 1 DROP"),
        "{witness}"
    );
    assert!(
        witness.contains("after: passes nft filter INPUT policy ACCEPT"),
        "{witness}"
    );
    // A mark outside the live mask opens nothing.
    let other = stale.replace("0x8000/0x8000", "0x4000/0x4000");
    assert_eq!(found(&other, live, &["nat"]), vec![Found::Nothing]);
}

#[test]
fn a_stale_dnat_into_a_live_drop_opens() {
    let stale = "*nat\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["nat"])[0]).to_string();
    assert!(witness.starts_with("tcp any → 10.2.0.2:9999, forwarded"), "{witness}");
    assert!(
        witness.contains("DNAT --to-destination 10.2.0.2:8080 then nft filter FORWARD rule 1 DROP"),
        "{witness}"
    );
}

#[test]
fn a_stale_recent_set_read_by_a_live_check_opens() {
    let stale = "*filter\n-A INPUT -p udp -m udp --dport 53 -m recent --set --name SCAN --mask 255.255.255.255 --rsource\nCOMMIT\n";
    let live = "*filter\n-A INPUT -m recent --rcheck --name SCAN --mask 255.255.255.255 --rsource -j DROP\nCOMMIT\n";
    let said = found(stale, live, &["filter"]);
    let witness = opens(&said[0]);
    assert!(
        witness.starts_with("udp any → any:53, arriving for the host"),
        "{witness}"
    );
    assert!(
        witness.contains("now: dropped legacy filter INPUT rule 1 -p udp -m udp --dport 53 -m recent --set --name SCAN --mask 255.255.255.255 --rsource then nft filter INPUT rule 1 DROP"),
        "{witness}"
    );
}

#[test]
fn a_live_user_chain_accepting_before_a_shared_drop_opens() {
    let stale = "*filter\n:guard - [0:0]\n-A INPUT -j guard\n-A guard -p tcp -j DROP\nCOMMIT\n";
    let live = "*filter\n:guard - [0:0]\n-A INPUT -j guard\n-A guard -p tcp -m tcp --dport 8080 -j ACCEPT\n-A guard -p tcp -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["filter"])[0]).to_string();
    assert!(witness.starts_with("tcp any → any:8080"), "{witness}");
    assert!(
        witness.contains("now: dropped legacy filter guard rule 1 DROP"),
        "{witness}"
    );
    assert!(
        witness.contains("after: passes nft filter guard rule 1 ACCEPT"),
        "{witness}"
    );
}

#[test]
fn a_stale_return_into_a_drop_policy_opens() {
    let stale = "*filter\n:INPUT DROP [0:0]\n-A INPUT -p udp -m udp --dport 53 -j RETURN\n-A INPUT -j ACCEPT\nCOMMIT\n";
    let live = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -m udp --dport 53 -j ACCEPT\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["filter"])[0]).to_string();
    assert!(witness.starts_with("udp any → any:53"), "{witness}");
    assert!(
        witness.contains("now: dropped legacy filter INPUT rule 1 RETURN then legacy filter INPUT policy DROP"),
        "{witness}"
    );
}

#[test]
fn a_stale_drop_policy_against_a_live_final_drop_opens_nothing() {
    let stale = "*filter\n:FORWARD DROP [0:0]\nCOMMIT\n";
    let live = "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -j DROP\nCOMMIT\n";
    assert_eq!(found(stale, live, &["filter"]), vec![Found::Nothing]);
}

#[test]
fn a_match_not_modelled_that_only_the_stale_copy_holds_holds_it_undecided_never_a_witness() {
    let stale = "*filter\n-A INPUT -p tcp -m tcp --dport 22 -m limit --limit 5/min -j ACCEPT\n-A INPUT -p tcp -m tcp --dport 22 -j DROP\nCOMMIT\n";
    let live = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n";
    let said = found(stale, live, &["filter"]);
    assert!(
        matches!(&said[0], Found::Undecided(why, _) if why.starts_with("`-A INPUT -p tcp -m tcp --dport 22 -m limit")
            && why.contains("decides tcp any → any:22")),
        "{said:?}"
    );
}

#[test]
fn connmark_saved_and_restored_carries_a_mark_to_a_live_drop() {
    let stale = "*mangle\n-A PREROUTING -p tcp -m tcp --dport 22 -j MARK --set-xmark 0x1/0xffffffff\n-A PREROUTING -j CONNMARK --save-mark --nfmask 0xffffffff --ctmask 0xffffffff\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -m connmark --mark 0x1 -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["mangle"])[0]).to_string();
    assert!(witness.starts_with("tcp any → any:22, forwarded"), "{witness}");
}

#[test]
fn a_recent_mask_not_all_ones_is_unknown_and_holds_where_only_the_stale_copy_writes_it() {
    let stale = "*filter\n-A INPUT -p udp -m udp --dport 53 -m recent --set --name SCAN --mask 255.255.255.0 --rsource\nCOMMIT\n";
    let live = "*filter\n-A INPUT -m recent --rcheck --name SCAN --mask 255.255.255.255 --rsource -j DROP\nCOMMIT\n";
    assert!(matches!(&found(stale, live, &["filter"])[0], Found::Undecided(why, _) if why.contains("255.255.255.0")));
}

#[test]
fn the_first_nat_binding_wins_and_an_order_that_alone_stops_is_said() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n";
    let live = "*nat\n-A PREROUTING -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:22\nCOMMIT\n*filter\n-A FORWARD -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["nat"])[0]).to_string();
    assert!(
        witness.contains("(now, legacy first at each hook: dropped legacy nat PREROUTING rule 1 DNAT --to-destination 10.2.0.2:8080 then nft filter FORWARD rule 1 DROP"),
        "{witness}"
    );
    assert!(
        witness.contains("after: passes nft nat PREROUTING rule 1 DNAT --to-destination 10.2.0.2:22"),
        "{witness}"
    );
}

#[test]
fn a_stale_dnat_from_one_source_into_a_live_drop_on_one_interface_opens() {
    // The stale rule names the source, the live block the interface: only
    // a packet naming both is stopped now and passes after.
    let stale =
        "*nat\n-A PREROUTING -s 10.0.1.2/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.0.2.2:9000\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -i c0 -p tcp -m tcp --dport 9000 -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["nat"])[0]).to_string();
    assert!(witness.starts_with("tcp 10.0.1.2 → any:80"), "{witness}");
    assert!(witness.contains("c0"), "{witness}");
    // A stale nat MARK from one source read by a live drop on one interface.
    let stale = "*nat\n-A PREROUTING -s 10.0.1.2/32 -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -i c0 -m mark --mark 0x1 -j DROP\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n";
    opens(&found(stale, live, &["nat"])[0]);
}

#[test]
fn a_stale_dnat_read_by_a_live_ctstate_dnat_drop_opens() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 3000 -j DNAT --to-destination 10.2.0.2:3001\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -m conntrack --ctstate DNAT -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["nat"])[0]).to_string();
    assert!(witness.starts_with("tcp any → any:3000, forwarded"), "{witness}");
    assert!(witness.contains("nft filter FORWARD rule 1 DROP"), "{witness}");
}

#[test]
fn a_stale_recent_set_on_one_port_read_by_a_live_check_on_another_opens() {
    let stale = "*filter\n-A INPUT -p udp -m udp --dport 5000 -m recent --set --name SCAN --mask 255.255.255.255 --rsource\nCOMMIT\n";
    let live = "*filter\n-A INPUT -p tcp -m tcp --dport 22 -m recent --rcheck --name SCAN --mask 255.255.255.255 --rsource -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["filter"])[0]).to_string();
    assert!(witness.starts_with("tcp any → any:22, arriving"), "{witness}");
    assert!(
        witness.contains("sent after udp any → any:5000, arriving for the host by any interface, NEW, whose address the legacy rules put in list SCAN"),
        "{witness}"
    );
}

#[test]
fn a_stale_redirect_into_a_live_drop_opens() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 8080\nCOMMIT\n";
    let live = "*filter\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["nat"])[0]).to_string();
    assert!(witness.starts_with("tcp any → any:80, arriving"), "{witness}");
    assert!(
        witness.contains("REDIRECT --to-ports 8080 then nft filter INPUT rule 1 DROP"),
        "{witness}"
    );
}

#[test]
fn a_stale_netmap_before_a_live_drop_on_its_range_holds_it_undecided_and_alone_opens_nothing() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -j NETMAP --to 10.9.0.0/24\nCOMMIT\n";
    let live = "*filter\n-A INPUT -d 10.9.0.1/32 -j DROP\nCOMMIT\n";
    let said = found(stale, live, &["nat"]);
    assert!(
        matches!(&said[0], Found::Undecided(why, _) if why.starts_with("after `-A PREROUTING -p tcp -m tcp --dport 80 -j NETMAP")),
        "{said:?}"
    );
    assert_eq!(found(stale, "*filter\nCOMMIT\n", &["nat"]), vec![Found::Nothing]);
}

#[test]
fn a_match_not_modelled_taken_both_ways_stopping_in_each_is_a_witness() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.1.0.1:80\n-A PREROUTING -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.1.0.2:80\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -d 10.1.0.0/24 -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["nat"])[0]).to_string();
    assert!(
        witness.contains(" → any:80, forwarded") && witness.contains("then nft filter FORWARD rule 1 DROP"),
        "{witness}"
    );
    // Taken one way only, it is unknown: never a witness.
    let one_way = "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.1.0.1:80\nCOMMIT\n";
    let said = found(one_way, live, &["nat"]);
    assert!(matches!(&said[0], Found::Undecided(..)), "{said:?}");
}

#[test]
fn addrtype_local_is_read_by_the_way_a_packet_takes() {
    let stale = "*nat\n:DOCKER - [0:0]\n-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n-A DOCKER -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x1/0x1\nCOMMIT\n";
    let live = "*filter\n-A INPUT -m mark --mark 0x1/0x1 -j DROP\n-A FORWARD -m mark --mark 0x1/0x1 -j DROP\n-A INPUT -m state --state INVALID -j DROP\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["nat"])[0]).to_string();
    assert!(witness.starts_with("tcp any → any:8080, arriving"), "{witness}");
}

#[test]
fn a_nat_table_no_rule_keeps_conntrack_on_for_is_never_met() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -m mark --mark 0x1 -j DROP\nCOMMIT\n";
    assert_eq!(found(stale, live, &["nat"]), vec![Found::Nothing]);
}

#[test]
fn a_dnat_of_what_arrives_for_the_host_is_forwarded_on() {
    let stale = "*nat\n:DOCKER - [0:0]\n-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n-A DOCKER -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("tcp any → any:80, arriving for the host"),
        "{witness}"
    );
    assert!(witness.contains("then nft filter FORWARD rule 1 DROP"), "{witness}");
    // And what is forwarded, DNATed to the host, arrives for it.
    let stale = "*nat\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 80 -m addrtype ! --dst-type LOCAL -j DNAT --to-destination 10.1.0.1:8080\nCOMMIT\n";
    let live = "*filter\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(witness.starts_with("tcp any → 10.2.0.2:80, forwarded"), "{witness}");
}

#[test]
fn what_the_host_sends_itself_loops_back_to_input() {
    let stale = "*nat\n-A OUTPUT -d 10.2.0.2/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 8080\nCOMMIT\n";
    let live = "*filter\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("tcp any → 10.2.0.2:80, sent by the host"),
        "{witness}"
    );
    // An `-i lo` accept before it lets it in.
    let live = "*filter\n-A INPUT -i lo -j ACCEPT\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
    let said = found_on(stale, live, &["nat"], &router());
    assert_eq!(said, vec![Found::Nothing]);
}

#[test]
fn a_live_rule_not_modelled_meeting_what_a_stale_dnat_rewrote_holds_it_undecided() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -p tcp -m u32 --u32 \"0x0>>0x16&0x3c@0x0&0xffff=0x1f90\" -j DROP\nCOMMIT\n";
    let said = found_on(stale, live, &["nat"], &router());
    assert!(
        matches!(&said[0], Found::Undecided(why, _) if why.starts_with("after `-A PREROUTING -p tcp -m tcp --dport 80 -j DNAT")
            && why.contains("the model cannot tell what `-A FORWARD -p tcp -m u32")),
        "{said:?}"
    );
}

#[test]
fn a_reply_a_live_rule_drops_for_what_a_stale_nat_rule_did_opens() {
    // The reply of what a stale MASQUERADE translated, dropped live.
    let stale = "*nat\n-A POSTROUTING -o rs -j MASQUERADE\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -m conntrack --ctstate SNAT -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("the reply to tcp any → any:any, forwarded"),
        "{witness}"
    );
    assert!(witness.contains("out by rs"), "{witness}");
    // The reply from the port a stale DNAT sent to, dropped live.
    let stale =
        "*nat\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -i rs -p tcp -m tcp --sport 8080 -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("the reply to tcp any → 10.2.0.2:80, forwarded"),
        "{witness}"
    );
}

#[test]
fn a_stale_mark_a_routing_rule_reads_is_undecided_not_a_witness() {
    let stale = "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p udp -m udp --dport 5000 -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n";
    let live = "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -m mark --mark 0x1 -j DROP\nCOMMIT\n";
    // Without a routing rule reading it, the mark's drop is a witness.
    assert!(opens(&found(stale, live, &["mangle"])[0]).contains("nft filter FORWARD rule 1 DROP"));
    // With `ip rule add fwmark 0x1 lookup 7`, the marked packet may go
    // another way: cannot tell, naming the routing rule.
    let rule = crate::kernel::ip_rules::MarkRule {
        priority: 100,
        mark: 1,
        mask: u32::MAX,
        table: 7,
    };
    let said = found_on(stale, live, &["mangle"], &Host::routing_by(&[rule]));
    match &said[0] {
        Found::Undecided(why, place) => {
            assert!(
                why.contains("`ip rule 100: fwmark 0x1/0xffffffff lookup 7` (a routing rule, routes not modelled)"),
                "{why}"
            );
            assert_eq!(place.0, b"mangle");
        }
        other => panic!("not undecided: {other:?}"),
    }
    // A routing rule reading other bits changes nothing.
    let other = crate::kernel::ip_rules::MarkRule {
        mark: 2,
        mask: 2,
        ..rule
    };
    assert!(matches!(
        found_on(stale, live, &["mangle"], &Host::routing_by(&[other]))[0],
        Found::Opens(_)
    ));
}

#[test]
fn an_ipv6_witness_whose_neighbour_discovery_the_live_copy_stops_is_undecided() {
    let stale = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j DROP\nCOMMIT\n";
    let live = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m conntrack --ctstate UNTRACKED -j DROP\nCOMMIT\n";
    // In IPv4 (no neighbour discovery by packets a filter sees): opens.
    assert!(opens(&found(stale, live, &["filter"])[0]).starts_with("tcp any → any:22"));
    match &found_on(stale, live, &["filter"], &Host::ipv6())[0] {
        Found::Undecided(why, place) => {
            assert!(why.starts_with("tcp any → any:22, arriving for the host by any interface, NEW would pass without the legacy copy, but only where its neighbours are already known: neighbour discovery (icmpv6 any → any:any, arriving for the host by any interface, UNTRACKED) is dropped nft filter INPUT rule 1 DROP"), "{why}");
            assert_eq!(place.0, b"filter");
        }
        other => panic!("not undecided: {other:?}"),
    }
    // Discovery let through first: the witness stands.
    let accepting = live.replace(
        "-A INPUT -m conntrack",
        "-A INPUT -p ipv6-icmp -j ACCEPT\n-A INPUT -m conntrack",
    );
    assert!(matches!(
        found_on(stale, &accepting, &["filter"], &Host::ipv6())[0],
        Found::Opens(_)
    ));
}

#[test]
fn a_reply_to_a_stale_snat_meets_raw_and_mangle_addressed_to_the_rewritten_source() {
    let stale = "*nat\n-A POSTROUTING -s 10.1.0.0/24 -o r1 -j SNAT --to-source 10.2.0.1\nCOMMIT\n";
    let live = "*raw\n-A PREROUTING -d 10.2.0.1/32 -i r1 -j DROP\nCOMMIT\n*filter\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("the reply to tcp 10.1.0.0 → any:any, forwarded in by any interface, out by r1"),
        "{witness}"
    );
    assert!(
        witness.contains(
            "now: dropped legacy nat POSTROUTING rule 1 SNAT --to-source 10.2.0.1 then nft raw PREROUTING rule 1 DROP"
        ),
        "{witness}"
    );
    // MASQUERADE: addressed to one of the host's, which addrtype reads.
    let masquerade = "*nat\n-A POSTROUTING -o r1 -j MASQUERADE\nCOMMIT\n";
    let local = "*raw\n-A PREROUTING -i r1 -p udp -m addrtype --dst-type LOCAL -j DROP\nCOMMIT\n*filter\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(masquerade, local, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("the reply to udp any → any:any, forwarded in by r1, out by r1"),
        "{witness}"
    );
    // After the nat place, the reply is addressed to the client again:
    // a filter rule on the rewritten address does not meet it.
    let filter =
        "*filter\n-A FORWARD -d 10.2.0.1/32 -j DROP\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n";
    assert_eq!(found_on(stale, filter, &["nat"], &router()), vec![Found::Nothing]);
}

#[test]
fn a_reply_to_a_stale_redirect_leaves_from_the_redirected_port() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 8080 -j REDIRECT --to-ports 9000\nCOMMIT\n";
    let live = "*filter\n-A OUTPUT -p tcp -m tcp --sport 9000 -j DROP\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n";
    let witness = opens(&found_on(stale, live, &["nat"], &router())[0]);
    assert!(
        witness.starts_with("the reply to tcp any → any:8080, arriving for the host"),
        "{witness}"
    );
    assert!(
        witness.contains("REDIRECT --to-ports 9000 then nft filter OUTPUT rule 1 DROP"),
        "{witness}"
    );
}

#[test]
fn an_iptables_nft_nat_table_alone_keeps_no_connection_tracking_on() {
    // Nothing keeps conntrack on: no packet meets either nat table, so the
    // stale nat mark is no witness (the kernel: tests/stale_fates.rs).
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x2/0x2\nCOMMIT\n";
    let live = "*nat\n-A PREROUTING -p udp -j MARK --set-xmark 0x1/0x1\nCOMMIT\n*filter\n-A FORWARD -m mark --mark 0x2/0x2 -j DROP\nCOMMIT\n";
    assert_eq!(found(stale, live, &["nat"]), vec![Found::Nothing]);
}

#[test]
fn a_witness_past_a_native_nftables_chain_is_undecided() {
    let stale = "*raw\n-A PREROUTING -p udp -m udp --dport 123 -j MARK --set-xmark 0x2/0x2\nCOMMIT\n";
    let live = "*filter\n-A FORWARD -m mark --mark 0x2/0x2 -j DROP\nCOMMIT\n";
    assert!(matches!(found(stale, live, &["raw"])[0], Found::Opens(_)));
    // `inet native pre` may clear the mark, or drop: not read.
    match &found_on(stale, live, &["raw"], &Host::with_native(b"PREROUTING", "inet native pre"))[0] {
        Found::Undecided(why, _) => assert!(
            why.contains("the model cannot tell what the native nftables chain inet native pre at PREROUTING (not read) does to udp any → any:123"),
            "{why}"
        ),
        other => panic!("not undecided: {other:?}"),
    }
}

#[test]
fn a_stale_nat_mark_a_live_accept_reads_before_a_drop_policy_opens() {
    let stale = "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x10/0xffffffff\nCOMMIT\n";
    let live = "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -m state --state RELATED,ESTABLISHED -j ACCEPT\n-A FORWARD -s 10.1.0.5/32 -m mark ! --mark 0x10 -j ACCEPT\nCOMMIT\n";
    let witness = opens(&found(stale, live, &["nat"])[0]);
    assert!(witness.starts_with("tcp 10.1.0.5 → any:80, forwarded"), "{witness}");
    assert!(
        witness.contains("then nft filter FORWARD policy DROP; after: passes nft filter FORWARD rule 2 ACCEPT"),
        "{witness}"
    );
}

mod probed;
