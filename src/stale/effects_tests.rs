//! The table of effects' own tests: each name once, and the docs hold it.

use super::*;

#[test]
fn each_name_is_in_the_table_once() {
    for (i, e) in EFFECTS.iter().enumerate() {
        assert!(
            EFFECTS[..i].iter().all(|other| other.name != e.name),
            "{} is in the table twice",
            e.name
        );
        assert_eq!(of(e.name.as_bytes(), e.kind).name, e.name);
    }
}

#[test]
fn a_name_not_listed_as_its_kind_takes_the_strictest_row() {
    assert_eq!(of(b"HMARK", Kind::Target).name, "(any other target)");
    assert_eq!(of(b"DROP", Kind::Match).name, "(any other match)");
    assert_eq!(of(b"tcp", Kind::Target).name, "(any other target)");
}

#[test]
fn docs_mixed_state_holds_the_table_as_the_code_does() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/mixed-state.md")).unwrap();
    let table = markdown();
    assert!(
        docs.contains(&table),
        "docs/mixed-state.md does not hold the table of effects as src/stale/effects.rs has it; write this in its place:\n{table}"
    );
}

/// [`EFFECTS`] as the Markdown table `docs/mixed-state.md` holds.
fn markdown() -> String {
    let mut out = String::from(
        "| name | kind | does to a packet | state another rule reads | keeps on | in `nat` | loaded by |\n|---|---|---|---|---|---|---|\n",
    );
    for e in EFFECTS.iter().chain([&UNLISTED_MATCH, &UNLISTED_TARGET]) {
        let name = if e.name.starts_with('(') {
            e.name.to_string()
        } else {
            format!("`{}`", e.name)
        };
        out.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} |\n",
            match e.kind {
                Match => "match",
                Target => "target",
            },
            match e.does {
                Reads => "reads",
                Observes => "observes",
                Accepts => "accepts",
                Returns => "returns",
                Blocks => "blocks",
                Queues => "queues",
                Translates => "translates",
                Changes => "changes",
            },
            match e.state {
                Nothing => "none",
                OwnRule => "its own",
                Writes => "writes",
                ByName => "by name",
                NotKnown => "not known",
            },
            match e.keeps_on {
                Kept::Nothing => "-",
                Defrag => "defrag",
                Conntrack => "conntrack",
            },
            if e.goes_in_nat { "goes" } else { "-" },
            if e.example.is_empty() {
                "-".to_string()
            } else {
                format!("`{}`", e.example)
            },
        ));
    }
    out
}
