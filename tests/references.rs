//! Every source a comment in `src/` cites is one a reader of this repository
//! can open (issue 12): no comment or string names a document that is not
//! in the repository, and every `[ref:KEY]` has an entry `- **[KEY]**` in
//! `docs/references.md`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Names of documents that are not in the repository. Matched anywhere in a
/// line, so comments, doc comments and user-visible strings are all covered.
const FORBIDDEN: &[&str] = &[
    "FACTS",
    "DESIGN §",
    "DESIGN.md",
    "seed 0",
    "Seed 0",
    "field case",
    "Field case",
    "shared/megatron",
    "shared/seeds",
    "shared/validation",
    "shared/DESIGN",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The forbidden names in one line of source.
fn forbidden_in(line: &str) -> Vec<&'static str> {
    FORBIDDEN
        .iter()
        .copied()
        .filter(|f| line.contains(f))
        .collect()
}

/// The keys cited as `[ref:KEY]` in `text`.
fn cited_keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("[ref:") {
        let after = &rest[i + 5..];
        match after.find(']') {
            Some(j) => {
                keys.push(after[..j].to_string());
                rest = &after[j + 1..];
            }
            None => {
                keys.push(after.to_string());
                break;
            }
        }
    }
    keys
}

/// The keys `docs/references.md` defines: lines starting `- **[KEY]**`.
fn defined_keys(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- **["))
        .filter_map(|l| l.split_once("]**").map(|(k, _)| k.to_string()))
        .collect()
}

fn is_valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[test]
fn the_checks_can_fail() {
    assert_eq!(forbidden_in("/// see FACTS §3"), vec!["FACTS"]);
    assert_eq!(forbidden_in("// (DESIGN §5)"), vec!["DESIGN §"]);
    assert_eq!(forbidden_in("//! seed 000's table"), vec!["seed 0"]);
    assert_eq!(forbidden_in("// field case M1"), vec!["field case"]);
    assert!(forbidden_in("// [ref:rajbhandari-2020] Figure 1").is_empty());
    assert!(forbidden_in("RecipeName::Seed => Recipe::SEED_2_2_12,").is_empty());
    assert_eq!(
        cited_keys("// a [ref:daly-2006] and [ref:case-m1]; [W1] is not a key"),
        vec!["daly-2006", "case-m1"]
    );
    assert_eq!(
        defined_keys("- **[daly-2006]** Daly, …\n  - **[x]** y\nnot - **[z]**"),
        vec!["daly-2006", "x"]
    );
    assert!(!is_valid_key("Daly 2006"));
}

#[test]
fn src_cites_only_documents_in_the_repository() {
    let files = rust_files(&root().join("src"));
    assert!(
        files.len() > 20,
        "found only {} files under src/",
        files.len()
    );
    let mut bad = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            for name in forbidden_in(line) {
                bad.push(format!(
                    "{}:{}: names {name:?} (not in the repository; cite a key of docs/references.md): {}",
                    f.strip_prefix(root()).unwrap().display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
}

#[test]
fn every_cited_key_is_in_references_md() {
    let refs = fs::read_to_string(root().join("docs/references.md"))
        .expect("docs/references.md must exist");
    let defined = defined_keys(&refs);
    let mut seen = BTreeSet::new();
    for k in &defined {
        assert!(is_valid_key(k), "docs/references.md: bad key {k:?}");
        assert!(
            seen.insert(k.clone()),
            "docs/references.md: key {k:?} defined twice"
        );
    }
    let mut files = rust_files(&root().join("src"));
    files.extend(rust_files(&root().join("tests")));
    let mut cited = BTreeSet::new();
    let mut missing = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            // This file's own examples are not citations.
            if f.ends_with("tests/references.rs") {
                continue;
            }
            for k in cited_keys(line) {
                if !seen.contains(&k) {
                    missing.push(format!(
                        "{}:{}: [ref:{k}] is not defined in docs/references.md",
                        f.strip_prefix(root()).unwrap().display(),
                        n + 1
                    ));
                }
                cited.insert(k);
            }
        }
    }
    assert!(missing.is_empty(), "\n{}", missing.join("\n"));
    // The sources the cost model rests on are cited from the code.
    for k in [
        "narayanan-2021",
        "korthikanti-2022",
        "rajbhandari-2020",
        "megatron-arguments",
        "megatron-parallel-state",
    ] {
        assert!(
            cited.contains(k),
            "no comment in src/ or tests/ cites [ref:{k}]"
        );
    }
}

/// Every part of the breakdown names a function that exists in the file it
/// names and a reference key that `docs/references.md` defines, so the
/// "priced by" column of `explain` can be followed.
#[test]
fn every_breakdown_part_names_a_real_function_and_reference() {
    use meshplan::cost::breakdown::Source;
    use meshplan::cost::{MemoryDetail, MemoryPart, TimePart};
    let refs = fs::read_to_string(root().join("docs/references.md")).unwrap();
    let defined: BTreeSet<String> = defined_keys(&refs).into_iter().collect();
    let sources: Vec<(&str, Source)> = TimePart::ALL
        .iter()
        .map(|p| (p.key(), p.source()))
        .chain(MemoryPart::ALL.iter().map(|p| (p.key(), p.source())))
        .chain(MemoryDetail::ALL.iter().map(|p| (p.key(), p.source())))
        .collect();
    assert_eq!(sources.len(), 13 + 7 + 9);
    for (key, s) in sources {
        assert!(
            defined.contains(s.reference),
            "part `{key}` cites [{}], not in docs/references.md",
            s.reference
        );
        for place in s.function.split("; ") {
            let (file, functions) = place
                .split_once(": ")
                .unwrap_or_else(|| panic!("part `{key}`: `{place}` is not `file: fn, fn`"));
            let text = fs::read_to_string(root().join(file))
                .unwrap_or_else(|e| panic!("part `{key}`: {file}: {e}"));
            for f in functions.split(", ") {
                assert!(
                    text.contains(&format!("fn {f}(")),
                    "part `{key}`: no fn {f} in {file}"
                );
            }
        }
    }
}
