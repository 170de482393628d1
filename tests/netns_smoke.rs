mod common;

#[test]
fn thread_netns_is_private() {
    common::enter_new_netns();
    common::sh("iptables-legacy -N SMOKE");
    let names = std::fs::read_to_string("/proc/thread-self/net/ip_tables_names").unwrap();
    assert_eq!(names.trim(), "filter");
}
