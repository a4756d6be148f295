//! Mutation test: thousands of damaged Python files (truncations, byte flips, deep nesting,
//! huge lines, bad encodings) never make the scanner panic, every file is accounted for, and
//! the issues.json written is valid.

use std::path::Path;

const CASES: usize = 2_000;
const SEED: u64 = 0x0005_eed0_fa11;

fn corpus() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "py") {
                out.push(std::fs::read(&path).unwrap());
            }
        }
    }
    out.sort();
    assert!(out.len() >= 5, "the mutation corpus needs the fixtures");
    out
}

fn mutate(rng: &mut fastrand::Rng, base: &[u8]) -> Vec<u8> {
    let mut bytes = base.to_vec();
    let at = |rng: &mut fastrand::Rng, len: usize| rng.usize(0..=len);
    match rng.u8(0..12) {
        0 => bytes.truncate(at(rng, base.len())),
        1 => {
            for _ in 0..rng.usize(1..12) {
                if !bytes.is_empty() {
                    let i = rng.usize(0..bytes.len());
                    bytes[i] = rng.u8(..);
                }
            }
        }
        2 => {
            let depth = rng.usize(100..1_500);
            let open = ["(", "[", "{", "f(", "not ", "-", "lambda: "][rng.usize(0..7)];
            let close = match open {
                "(" | "f(" => ")",
                "[" => "]",
                "{" => "}",
                _ => "",
            };
            let expr = format!("x = {}1{}\n", open.repeat(depth), close.repeat(depth));
            let i = at(rng, bytes.len());
            bytes.splice(i..i, expr.into_bytes());
        }
        3 => {
            let line = format!("y = \"{}\"\n", "a".repeat(rng.usize(10_000..100_000)));
            let i = at(rng, bytes.len());
            bytes.splice(i..i, line.into_bytes());
        }
        4 => {
            let mut nested = String::new();
            for d in 0..rng.usize(50..300) {
                nested.push_str(&" ".repeat(d));
                nested.push_str("if x:\n");
            }
            bytes.extend(nested.into_bytes());
        }
        5 => {
            let i = at(rng, bytes.len());
            bytes.splice(i..i, [0xff, 0xfe, 0x00, 0xc3]);
        }
        6 => {
            bytes = String::from_utf8_lossy(&bytes)
                .replace('\n', "\r\n")
                .into_bytes();
        }
        7 => bytes
            .splice(0..0, b"\xef\xbb\xbf".iter().copied())
            .for_each(drop),
        8 => {
            let i = at(rng, bytes.len());
            let j = (i + rng.usize(0..400)).min(bytes.len());
            bytes.drain(i..j);
        }
        9 => {
            let i = at(rng, bytes.len());
            let snippet = [
                "\"\"\"",
                "'",
                "f\"{",
                "\\",
                "\t",
                "    ",
                "# npu: ignore[",
                "async ",
                "match x:\n case",
            ];
            bytes.splice(i..i, snippet[rng.usize(0..snippet.len())].bytes());
        }
        10 => {
            let coding = ["latin-1", "utf-16", "nonsense", "cp1252", "utf-8"][rng.usize(0..5)];
            bytes.splice(0..0, format!("# -*- coding: {coding} -*-\n").into_bytes());
        }
        _ => {
            let terms = vec!["a"; rng.usize(500..3_000)].join(" + ");
            bytes.extend(format!("\nz = {terms}\n").into_bytes());
        }
    }
    bytes
}

#[test]
fn mutated_sources_never_break_the_scan() {
    let corpus = corpus();
    let mut rng = fastrand::Rng::with_seed(SEED);
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    for i in 0..CASES {
        let base = &corpus[rng.usize(0..corpus.len())];
        let bytes = mutate(&mut rng, base);
        let sub = project.join(format!("d{}", i % 40));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("case_{i:05}.py")), bytes).unwrap();
    }
    let settings = scan::Settings {
        threads: 2,
        ..scan::Settings::default()
    };
    let result = scan::scan(&project, &settings).unwrap();
    assert_eq!(result.stats.files, CASES, "every file is accounted for");
    for u in &result.unparsed {
        assert!(
            !u.reason.starts_with("internal error"),
            "{}: the checker panicked: {}",
            u.file,
            u.reason
        );
    }
    // Some cases must parse and some must not, or the mutations are not doing their job.
    assert!(
        result.unparsed.len() > CASES / 10,
        "{}",
        result.unparsed.len()
    );
    assert!(
        result.unparsed.len() < CASES * 9 / 10,
        "{}",
        result.unparsed.len()
    );
    // Every unparsable text file is also a P_SYN issue (binary files are only listed).
    let syn: std::collections::BTreeSet<&str> = result
        .issues
        .iter()
        .filter(|i| i.pattern == "P_SYN")
        .map(|i| i.file.as_str())
        .collect();
    for u in &result.unparsed {
        assert!(
            syn.contains(u.file.as_str()) || u.reason.starts_with("binary file"),
            "{}: unparsed ({}) but no P_SYN issue",
            u.file,
            u.reason
        );
    }

    let out = dir.path().join("out");
    scan::write_issues_json(&out, "project", &result).unwrap();
    let written = issue_model::load(&out.join("issues.json")).unwrap();
    assert_eq!(written.issues.len(), result.issues.len());
    assert_eq!(written.unparsed.len(), result.unparsed.len());
    // Rescanning merges cleanly: same ids, nothing resolved.
    let report = scan::write_issues_json(&out, "project", &result).unwrap();
    assert!(report.new.is_empty() && report.resolved.is_empty());
}
