//! Mutation test: thousands of damaged Python files (truncations, byte flips, deep nesting,
//! huge lines, bad encodings) never make the scanner panic, every file is accounted for, and
//! the issues.json written is valid.

use std::fmt::Write as _;
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

/// Wait for `child` at most `limit`; past it, kill it and fail with `what`.
fn wait_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
    what: &str,
) -> std::process::ExitStatus {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("{what} (still running after {limit:?})");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A rule that panics on one file, on a worker thread while the main thread waits: the scan
/// ends (the panic message reaches stderr), the file is reported as not checked, the others
/// are scanned.
#[test]
fn a_rule_panic_on_a_worker_neither_hangs_nor_stops_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("boom.py", "import torch\nx = torch.zeros(3).cuda()\n"),
        ("ok.py", "import torch\ny = torch.ones(3).cuda()\n"),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_npu-scan"))
        .arg(dir.path())
        .args(["--threads", "2", "--no-progress", "--output"])
        .arg(out.path())
        .env("NPU_SCAN_DEBUG_PANIC_IN", "boom.py")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_within(
        &mut child,
        std::time::Duration::from_mins(1),
        "npu-scan hung after a rule panicked on a worker thread",
    );
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("boom.py: internal error while checking this file"),
        "{stderr}"
    );
    let issues: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("issues.json")).unwrap()).unwrap();
    let files: Vec<&str> = issues["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["file"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["ok.py"], "the other file is scanned: {issues}");
    let unparsed = &issues["unparsed"][0];
    assert_eq!(unparsed["file"], "boom.py", "{issues}");
    assert!(
        unparsed["reason"]
            .as_str()
            .unwrap()
            .starts_with("internal error while checking this file"),
        "{issues}"
    );
}

/// On a terminal the progress bar is drawn from the worker threads: the scan of a tree large
/// enough to draw it ends (it once waited forever on the stderr lock held by the main thread).
/// Runs under a pseudo-terminal made by `script` (util-linux).
#[test]
fn the_progress_bar_on_a_terminal_does_not_hang_the_scan() {
    assert!(
        std::process::Command::new("script")
            .arg("--version")
            .output()
            .is_ok(),
        "this test needs `script` (util-linux) for a pseudo-terminal"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("import torch\n");
    for i in 0..40 {
        writeln!(
            text,
            "def f{i}(x):
    return torch.zeros(3).cuda() + x"
        )
        .unwrap();
    }
    for i in 0..600 {
        std::fs::write(dir.path().join(format!("m{i}.py")), &text).unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let command = format!(
        "'{}' '{}' --threads 2 --output '{}'",
        env!("CARGO_BIN_EXE_npu-scan"),
        dir.path().display(),
        out.path().display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_within(
        &mut child,
        std::time::Duration::from_mins(2),
        "npu-scan on a terminal did not end",
    );
    // `script -e` exits with the scan's code: 1, issues found.
    assert_eq!(status.code(), Some(1));
    assert!(out.path().join("issues.json").is_file());
}
