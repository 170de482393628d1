//! `iptables-wrapper detect --format prometheus`: its output parsed by a real
//! Prometheus / OpenMetrics text parser (openmetrics-parser, both grammars)
//! in the clean, mixed and legacy states and with counts that cannot be
//! read, its values checked against the rules each test put there, and its
//! usage errors. Each test in a network namespace of its own, against the
//! real iptables-legacy / iptables-nft. Also: the doc and the example alert
//! rules name only metrics that exist.

mod common;

use common::OutputWithin as _;

use common::Node;
use openmetrics_parser::{openmetrics, prometheus, MetricNumber, OpenMetricsType, OpenMetricsValue};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::Output;

/// Every metric family the exposition has, in its order (docs/metrics.md).
const FAMILIES: [&str; 17] = [
    "iptables_wrapper_host_backend_info",
    "iptables_wrapper_backend_runnable",
    "iptables_wrapper_rules",
    "iptables_wrapper_rules_state",
    "iptables_wrapper_mixed_state",
    "iptables_wrapper_stale_state",
    "iptables_wrapper_stale_rules",
    "iptables_wrapper_stale_non_accept_policies",
    "iptables_wrapper_stale_user_chains",
    "iptables_wrapper_stale_tables_left_alone",
    "iptables_wrapper_disagreeing_evidence",
    "iptables_wrapper_contradicting_evidence",
    "iptables_wrapper_warnings",
    "iptables_wrapper_stale_removal_interrupted",
    "iptables_wrapper_decision_duration_seconds",
    "iptables_wrapper_detect_duration_seconds",
    "iptables_wrapper_detect_timestamp_seconds",
];

/// The parsed samples: (metric name, labels) -> value.
struct Scrape {
    samples: BTreeMap<(String, BTreeMap<String, String>), f64>,
    /// The metric families present, in FAMILIES order.
    names: Vec<&'static str>,
    text: String,
}

impl Scrape {
    /// The value of the sample `name{labels}`, if there is one.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.samples.get(&(name.to_string(), labels)).copied()
    }

    /// Like `get`, but the sample must be there.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no sample {name}{labels:?} in:\n{}", self.text))
    }

    /// All samples of `name`.
    fn all(&self, name: &str) -> Vec<(&BTreeMap<String, String>, f64)> {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, labels), value)| (labels, *value))
            .collect()
    }

    /// The one state of a state gauge whose sample is 1, checking that the
    /// three states are there and the others are 0.
    fn state(&self, name: &str, labels: &[(&str, &str)]) -> &'static str {
        let mut current = Vec::new();
        for state in ["known", "absent", "unknown"] {
            let mut with_state = labels.to_vec();
            with_state.push(("state", state));
            match self.value(name, &with_state) {
                1.0 => current.push(state),
                0.0 => {}
                other => panic!("{name}{with_state:?} is {other}"),
            }
        }
        assert_eq!(current.len(), 1, "{name}{labels:?}: {current:?} in:\n{}", self.text);
        current[0]
    }

    /// The sum of `name` over the samples whose labels include `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.all(name)
            .into_iter()
            .filter(|(have, _)| labels.iter().all(|(k, v)| have.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, value)| value)
            .sum()
    }
}

fn number(value: &MetricNumber) -> f64 {
    value.as_f64()
}

/// Runs `detect --format prometheus` as `detect` (exit 0, nothing on stderr)
/// and parses its stdout with both grammars: OpenMetrics (strict: `# EOF`,
/// HELP and TYPE per family, no sample twice) and Prometheus text format
/// 0.0.4 (what node-exporter's textfile collector reads). Both must agree.
fn scrape_output(out: &Output) -> Scrape {
    let text = String::from_utf8(out.stdout.clone()).expect("UTF-8");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "detect --format prometheus: {:?}\nstderr: {}\nstdout: {text}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed = openmetrics::parse_openmetrics(&text).unwrap_or_else(|e| panic!("not OpenMetrics: {e:?}\n{text}"));
    let mut samples = BTreeMap::new();
    for (name, family) in &parsed.families {
        assert_eq!(family.family_type, OpenMetricsType::Gauge, "{name}");
        assert!(name.starts_with("iptables_wrapper_"), "{name}");
        assert!(!family.help.is_empty(), "{name} has no HELP");
        for sample in family.iter_samples() {
            let labels = sample
                .get_labelset()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let OpenMetricsValue::Gauge(value) = &sample.value else {
                panic!("{name}: not a gauge value: {:?}", sample.value)
            };
            assert!(samples.insert((name.clone(), labels), number(value)).is_none());
        }
    }
    let names: Vec<&str> = FAMILIES
        .into_iter()
        .filter(|name| parsed.families.contains_key(*name))
        .collect();
    assert_eq!(names.len(), parsed.families.len(), "a family not in FAMILIES: {text}");

    let classic = prometheus::parse_prometheus(&text).unwrap_or_else(|e| panic!("not Prometheus text: {e:?}\n{text}"));
    let mut classic_count = 0;
    for (name, family) in &classic.families {
        for sample in family.iter_samples() {
            let labels: BTreeMap<String, String> = sample
                .get_labelset()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let openmetrics_parser::PrometheusValue::Gauge(value) = &sample.value else {
                panic!("{name}: not a gauge in the Prometheus grammar")
            };
            assert_eq!(samples.get(&(name.clone(), labels)), Some(&number(value)), "{name}");
            classic_count += 1;
        }
    }
    assert_eq!(classic_count, samples.len());
    Scrape { samples, names, text }
}

fn detect_metrics(node: &Node) -> Scrape {
    scrape_output(
        &node
            .wrapper()
            .args(["detect", "--format", "prometheus"])
            .output_within_limit()
            .unwrap(),
    )
}

/// What every exposition says whatever the state: each family's host
/// backend once, timings and a timestamp of now.
fn check_common(scrape: &Scrape) {
    if scrape.names.len() < FAMILIES.len() {
        let unknown = scrape.value(
            "iptables_wrapper_rules_state",
            &[("backend", "legacy"), ("state", "unknown")],
        ) + scrape.value(
            "iptables_wrapper_rules_state",
            &[("backend", "nft"), ("state", "unknown")],
        );
        assert!(
            unknown > 0.0,
            "families missing with every count known: {}",
            scrape.text
        );
    }
    for family in ["ipv4", "ipv6"] {
        let backends: Vec<_> = scrape
            .all("iptables_wrapper_host_backend_info")
            .into_iter()
            .filter(|(labels, _)| labels["family"] == family)
            .collect();
        assert_eq!(backends.len(), 1, "{family}: {}", scrape.text);
        assert_eq!(backends[0].1, 1.0);
        // The test nodes have both backends installed.
        let backend = backends[0].0["backend"].as_str();
        let runnable = scrape.value(
            "iptables_wrapper_backend_runnable",
            &[("family", family), ("backend", backend)],
        );
        assert_eq!(runnable, 1.0, "{family}: {}", scrape.text);
        let took = scrape.value("iptables_wrapper_decision_duration_seconds", &[("family", family)]);
        assert!(took > 0.0 && took < 10.0, "{took}");
    }
    let took = scrape.value("iptables_wrapper_detect_duration_seconds", &[]);
    assert!(took > 0.0 && took < 10.0, "{took}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let at = scrape.value("iptables_wrapper_detect_timestamp_seconds", &[]);
    assert!(at <= now && at > now - 60.0, "{at} vs {now}");
}

fn host_backend(scrape: &Scrape, family: &str) -> (String, String) {
    let (labels, _) = scrape
        .all("iptables_wrapper_host_backend_info")
        .into_iter()
        .find(|(labels, _)| labels["family"] == family)
        .unwrap_or_else(|| panic!("no host backend for {family}: {}", scrape.text));
    (labels["backend"].clone(), labels["decided_by"].clone())
}

/// `count` rules in `chain` of `table`, as one restore of `tool`.
fn restore_rules(tool: &str, table: &str, chain: &str, count: usize) -> String {
    let mut script = format!("{tool} --noflush <<'EOF'\n*{table}\n");
    for rule in 0..count {
        script.push_str(&format!(
            "-A {chain} -s 10.{}.{}.1/32 -j ACCEPT\n",
            rule / 250,
            rule % 250
        ));
    }
    script.push_str("COMMIT\nEOF\n");
    script
}

#[test]
fn clean_nft_node() {
    common::root_or_skip!();
    let node = Node::new("metrics-clean");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    node.sh(&restore_rules("iptables-nft-restore", "filter", "INPUT", 12));
    node.sh("ip6tables-nft -A INPUT -s 2001:db8::1 -j DROP && ip6tables-nft -A OUTPUT -j ACCEPT");
    let scrape = detect_metrics(&node);
    check_common(&scrape);
    for family in ["ipv4", "ipv6"] {
        assert_eq!(host_backend(&scrape, family), ("nft".into(), "host-link".into()));
        // Nothing in legacy: every table's count is a known zero.
        let stale = scrape.state(
            "iptables_wrapper_stale_state",
            &[("family", family), ("backend", "legacy")],
        );
        assert!(stale == "known" || stale == "absent", "{stale}");
        for table in ["raw", "mangle", "filter", "security", "nat"] {
            let labels = [("family", family), ("backend", "legacy"), ("table", table)];
            assert_eq!(scrape.value("iptables_wrapper_stale_rules", &labels), 0.0);
            assert_eq!(scrape.value("iptables_wrapper_stale_non_accept_policies", &labels), 0.0);
            assert_eq!(scrape.value("iptables_wrapper_stale_user_chains", &labels), 0.0);
        }
        assert_eq!(scrape.value("iptables_wrapper_warnings", &[("family", family)]), 0.0);
        assert_eq!(
            scrape.sum("iptables_wrapper_disagreeing_evidence", &[("family", family)]),
            0.0
        );
    }
    assert_eq!(scrape.names, FAMILIES);
    assert_eq!(scrape.value("iptables_wrapper_rules", &[("backend", "nft")]), 14.0);
    assert_eq!(
        scrape.state("iptables_wrapper_rules_state", &[("backend", "nft")]),
        "known"
    );
    assert_eq!(scrape.value("iptables_wrapper_rules", &[("backend", "legacy")]), 0.0);
    assert_eq!(scrape.value("iptables_wrapper_mixed_state", &[]), 0.0);
}

#[test]
fn mixed_node_after_an_upgrade() {
    common::root_or_skip!();
    let node = Node::new("metrics-mixed");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    // What the old backend still holds: 20 rules in filter INPUT, a user
    // chain with a jump to it and one rule in it, a FORWARD DROP policy,
    // 3 rules in nat; one IPv6 rule.
    node.sh(&restore_rules("iptables-legacy-restore", "filter", "INPUT", 20));
    node.sh(&restore_rules("iptables-legacy-restore", "nat", "PREROUTING", 3));
    node.sh(
        "iptables-legacy -N KUBE-FORWARD && iptables-legacy -A FORWARD -j KUBE-FORWARD \
         && iptables-legacy -A KUBE-FORWARD -j ACCEPT && iptables-legacy -P FORWARD DROP \
         && ip6tables-legacy -A INPUT -s 2001:db8::1 -j DROP",
    );
    // The host's own rules, in nft.
    node.sh(&restore_rules("iptables-nft-restore", "filter", "INPUT", 30));
    let scrape = detect_metrics(&node);
    check_common(&scrape);
    assert_eq!(scrape.value("iptables_wrapper_mixed_state", &[]), 1.0);
    assert_eq!(scrape.value("iptables_wrapper_rules", &[("backend", "legacy")]), 26.0);
    assert_eq!(scrape.value("iptables_wrapper_rules", &[("backend", "nft")]), 30.0);
    for backend in ["legacy", "nft"] {
        assert_eq!(
            scrape.state("iptables_wrapper_rules_state", &[("backend", backend)]),
            "known"
        );
    }
    for family in ["ipv4", "ipv6"] {
        assert_eq!(host_backend(&scrape, family), ("nft".into(), "host-link".into()));
        assert_eq!(
            scrape.state(
                "iptables_wrapper_stale_state",
                &[("family", family), ("backend", "legacy")]
            ),
            "known"
        );
    }
    let v4 = |table| [("family", "ipv4"), ("backend", "legacy"), ("table", table)];
    assert_eq!(scrape.value("iptables_wrapper_stale_rules", &v4("filter")), 22.0);
    assert_eq!(scrape.value("iptables_wrapper_stale_rules", &v4("nat")), 3.0);
    assert_eq!(scrape.value("iptables_wrapper_stale_rules", &v4("mangle")), 0.0);
    assert_eq!(
        scrape.value("iptables_wrapper_stale_non_accept_policies", &v4("filter")),
        1.0
    );
    assert_eq!(
        scrape.value("iptables_wrapper_stale_non_accept_policies", &v4("nat")),
        0.0
    );
    assert_eq!(scrape.value("iptables_wrapper_stale_user_chains", &v4("filter")), 1.0);
    let v6_filter = [("family", "ipv6"), ("backend", "legacy"), ("table", "filter")];
    assert_eq!(scrape.value("iptables_wrapper_stale_rules", &v6_filter), 1.0);
    assert_eq!(
        scrape.sum("iptables_wrapper_stale_rules", &[("family", "ipv6")]),
        1.0,
        "{}",
        scrape.text
    );
    // The counts point to nft (30 > 26), but legacy's rules and DROP policy
    // under an nft host link disagree, and so does the lock file legacy made.
    assert_eq!(scrape.names, FAMILIES);
    for family in ["ipv4", "ipv6"] {
        assert_eq!(
            scrape.value(
                "iptables_wrapper_disagreeing_evidence",
                &[("family", family), ("source", "xtables-lock")]
            ),
            1.0,
            "{}",
            scrape.text
        );
        assert_eq!(
            scrape.value(
                "iptables_wrapper_disagreeing_evidence",
                &[("family", family), ("source", "hint-chain")]
            ),
            0.0
        );
        assert!(scrape.value("iptables_wrapper_warnings", &[("family", family)]) >= 2.0);
    }
    // A legacy hint chain disagrees too, in both families' decisions.
    node.sh("iptables-legacy -t mangle -N KUBE-IPTABLES-HINT");
    let scrape = scrape_output(
        &node
            .wrapper()
            .args(["detect", "--format=prometheus"])
            .output_within_limit()
            .unwrap(),
    );
    for family in ["ipv4", "ipv6"] {
        assert_eq!(
            scrape.value(
                "iptables_wrapper_disagreeing_evidence",
                &[("family", family), ("source", "hint-chain")]
            ),
            1.0,
            "{}",
            scrape.text
        );
        assert!(scrape.value("iptables_wrapper_warnings", &[("family", family)]) >= 1.0);
    }
    assert_eq!(
        scrape.value(
            "iptables_wrapper_stale_user_chains",
            &[("family", "ipv4"), ("backend", "legacy"), ("table", "mangle")]
        ),
        1.0
    );
}

#[test]
fn legacy_node() {
    common::root_or_skip!();
    let node = Node::new("metrics-legacy");
    node.sh(&restore_rules("iptables-legacy-restore", "filter", "INPUT", 25));
    let scrape = detect_metrics(&node);
    check_common(&scrape);
    for family in ["ipv4", "ipv6"] {
        assert_eq!(host_backend(&scrape, family), ("legacy".into(), "rule-counts".into()));
        let stale = scrape.state(
            "iptables_wrapper_stale_state",
            &[("family", family), ("backend", "nft")],
        );
        assert!(stale == "known" || stale == "absent", "{stale}");
        assert_eq!(scrape.sum("iptables_wrapper_stale_rules", &[("family", family)]), 0.0);
        assert_eq!(
            scrape.value(
                "iptables_wrapper_stale_tables_left_alone",
                &[("family", family), ("backend", "nft")]
            ),
            0.0
        );
    }
    assert_eq!(scrape.names, FAMILIES);
    assert_eq!(scrape.value("iptables_wrapper_rules", &[("backend", "legacy")]), 25.0);
    assert_eq!(
        scrape.state("iptables_wrapper_rules_state", &[("backend", "legacy")]),
        "known"
    );
    assert_eq!(scrape.value("iptables_wrapper_rules", &[("backend", "nft")]), 0.0);
    assert_eq!(scrape.value("iptables_wrapper_mixed_state", &[]), 0.0);
    // Rules left in nft on a legacy host: stale in nft, in a table that is
    // iptables-nft's; a native table with a rule without a counter is not.
    node.sh(&restore_rules("iptables-nft-restore", "nat", "OUTPUT", 4));
    node.sh("nft add table ip raw && nft add chain ip raw PREROUTING '{ type filter hook prerouting priority -300; }' && nft add rule ip raw PREROUTING accept");
    let scrape = detect_metrics(&node);
    assert_eq!(host_backend(&scrape, "ipv4"), ("legacy".into(), "rule-counts".into()));
    let v4 = |table| [("family", "ipv4"), ("backend", "nft"), ("table", table)];
    assert_eq!(
        scrape.value("iptables_wrapper_stale_rules", &v4("nat")),
        4.0,
        "{}",
        scrape.text
    );
    assert_eq!(scrape.value("iptables_wrapper_stale_rules", &v4("raw")), 0.0);
    assert_eq!(
        scrape.value(
            "iptables_wrapper_stale_tables_left_alone",
            &[("family", "ipv4"), ("backend", "nft")]
        ),
        1.0
    );
    assert_eq!(scrape.value("iptables_wrapper_rules", &[("backend", "nft")]), 5.0);
}

#[test]
fn counts_that_cannot_be_read_are_not_zero() {
    common::root_or_skip!();
    let node = Node::new("metrics-unknown");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    node.sh(&restore_rules("iptables-legacy-restore", "filter", "INPUT", 20));
    node.sh(&restore_rules("iptables-nft-restore", "filter", "INPUT", 20));
    let run_dir = node.path("nobody-run");
    std::fs::create_dir(&run_dir).unwrap();
    std::os::unix::fs::chown(&run_dir, Some(65534), Some(65534)).unwrap();
    // As nobody: no CAP_NET_ADMIN, so neither the kernel nor the save tools
    // answer; the host link still decides.
    let out = node
        .wrapper()
        .env("IPTABLES_WRAPPER_RUN_DIR", &run_dir)
        .args(["detect", "--format", "prometheus"])
        .uid(65534)
        .gid(65534)
        .output_within_limit()
        .unwrap();
    let scrape = scrape_output(&out);
    check_common(&scrape);
    assert_eq!(host_backend(&scrape, "ipv4"), ("nft".into(), "host-link".into()));
    for backend in ["legacy", "nft"] {
        assert_eq!(
            scrape.state("iptables_wrapper_rules_state", &[("backend", backend)]),
            "unknown"
        );
        assert_eq!(scrape.get("iptables_wrapper_rules", &[("backend", backend)]), None);
    }
    assert_eq!(scrape.get("iptables_wrapper_mixed_state", &[]), None, "{}", scrape.text);
    // Families with no sample are left out whole, HELP and TYPE too.
    for name in [
        "iptables_wrapper_rules",
        "iptables_wrapper_mixed_state",
        "iptables_wrapper_stale_rules",
    ] {
        assert!(
            !scrape.names.contains(&name) && !scrape.text.contains(&format!(" {name} ")),
            "{name}"
        );
    }
    for family in ["ipv4", "ipv6"] {
        assert_eq!(
            scrape.state(
                "iptables_wrapper_stale_state",
                &[("family", family), ("backend", "legacy")]
            ),
            "unknown"
        );
        assert!(scrape.all("iptables_wrapper_stale_rules").is_empty(), "{}", scrape.text);
    }
}

#[test]
fn format_usage_errors_are_one_line() {
    common::root_or_skip!();
    let node = Node::new("metrics-usage");
    let cases: [(&[&str], &str); 8] = [
        (&["--format", "prometheus", "--json"], "--json"),
        (&["--json", "--format", "json"], "--format"),
        (&["--format", "text", "--format", "text"], "--format"),
        (&["--json", "--json"], "--json"),
        (&["--format", "xml"], "text, json, prometheus, not \"xml\""),
        (&["--format="], "text, json, prometheus, not \"\""),
        (&["--format"], "text, json, prometheus"),
        (&["--format", "prometheus", "--for", "ip6tables"], "--for"),
    ];
    for (args, named) in cases {
        let out = node.wrapper().arg("detect").args(args).output_within_limit().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    let twice = node
        .wrapper()
        .args(["detect", "--for", "iptables", "--for", "ip6tables"])
        .output_within_limit()
        .unwrap();
    assert_eq!(twice.status.code(), Some(2));
    // --format json is --json, --format text the default report.
    let first_line = |args: &[&str]| {
        let out = node.wrapper().arg("detect").args(args).output_within_limit().unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    let json: serde_json::Value =
        serde_json::from_str(&first_line(&["--format", "json", "--for", "ip6tables"])).unwrap();
    assert_eq!(json["command"], "ip6tables");
    assert_eq!(first_line(&["--format", "text"]), first_line(&[]));
}

/// The metric names in `text`: each `iptables_wrapper_...` word but the
/// prefix alone.
fn metric_names_in(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("iptables_wrapper_") && *word != "iptables_wrapper_")
        .map(str::to_string)
        .collect()
}

#[test]
fn the_docs_and_the_alert_rules_name_only_metrics_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "examples/prometheus-rules.yaml",
        "examples/prometheus-rules.test.yaml",
        "docs/metrics.md",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for name in metric_names_in(&text) {
            assert!(
                FAMILIES.contains(&name.as_str()),
                "{file} names {name}, which is not exported"
            );
        }
    }
    // Every metric is in the doc's table.
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    for name in FAMILIES {
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "docs/metrics.md does not describe {name}"
        );
    }
}
