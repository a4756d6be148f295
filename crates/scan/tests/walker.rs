//! The walker visits every `Name` that `CPython`'s `ast.walk` reports, on a fixture that uses
//! every node kind; and deep nesting neither overflows the stack nor stops the scan.

use scan::source::{self, LineIndex, ast};
use scan::walk::{self, Visitor};
use std::path::Path;
use std::process::Command;

struct Names<'t> {
    text: &'t str,
    index: LineIndex,
    found: Vec<(String, u32, u32)>,
}

impl<'a> Visitor<'a> for Names<'_> {
    fn visit_expr(&mut self, expr: &'a ast::Expr) {
        if let ast::Expr::Name(name) = expr {
            let (line, column) = self.index.position(self.text, ast::Ranged::start(expr));
            self.found.push((name.id.as_str().to_owned(), line, column));
        }
        walk::walk_expr(self, expr);
    }
}

fn python() -> String {
    std::env::var("NPU_PATCHER_PYTHON").unwrap_or_else(|_| {
        panic!(
            "NPU_PATCHER_PYTHON is not set: this test compares against CPython's ast module. \
             Run `cargo xtask test`, or set NPU_PATCHER_PYTHON to the interpreter that \
             `cargo xtask venv` prints"
        )
    })
}

#[test]
fn names_match_cpython_ast_walk() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/walker/all_nodes.py");
    let text = std::fs::read_to_string(&fixture).unwrap();
    let script = "import ast, json, sys\n\
        tree = ast.parse(open(sys.argv[1], encoding='utf-8').read())\n\
        names = [[n.id, n.lineno, n.col_offset + 1] for n in ast.walk(tree) if isinstance(n, ast.Name)]\n\
        print(json.dumps(sorted(names)))\n";
    let out = Command::new(python())
        .args(["-c", script])
        .arg(&fixture)
        .output()
        .expect("cannot run the Python interpreter named by NPU_PATCHER_PYTHON");
    assert!(
        out.status.success(),
        "CPython failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<(String, u32, u32)> = serde_json::from_slice(&out.stdout).unwrap();

    let parsed = source::parse(&text, "all_nodes.py").unwrap();
    let mut names = Names {
        text: &text,
        index: LineIndex::new(&text),
        found: Vec::new(),
    };
    names.visit_body(&parsed.body);
    let mut found = names.found;
    found.sort();
    assert!(
        expected.len() > 150,
        "the fixture should exercise many names"
    );
    let missing: Vec<_> = expected.iter().filter(|n| !found.contains(n)).collect();
    let extra: Vec<_> = found.iter().filter(|n| !expected.contains(n)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "walker differs from CPython\nmissing: {missing:?}\nextra: {extra:?}"
    );
    assert_eq!(found, expected);
}

#[test]
fn deep_nesting_is_scanned_without_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let terms = vec!["x"; 50_000].join(" + ");
    std::fs::write(
        dir.path().join("long_sum.py"),
        format!("import torch\ny = {terms}\n"),
    )
    .unwrap();
    let parens = format!("z = {}1{}\n", "(".repeat(5_000), ")".repeat(5_000));
    std::fs::write(dir.path().join("parens.py"), parens).unwrap();
    let calls = format!("w = {}0{}\n", "f(".repeat(3_000), ")".repeat(3_000));
    std::fs::write(dir.path().join("calls.py"), calls).unwrap();
    let result = scan::scan(dir.path(), &scan::Settings::default()).unwrap();
    assert_eq!(result.stats.files, 3);
    for u in &result.unparsed {
        // A parser limit is acceptable for absurd nesting, but it must be reported, not crash.
        assert!(!u.reason.is_empty());
    }
    assert!(
        !result.unparsed.iter().any(|u| u.file == "long_sum.py"),
        "a 50,000-term sum must parse: {:?}",
        result.unparsed
    );
    assert!(result.warnings.is_empty(), "{:?}", result.warnings);
}

#[test]
fn absurd_nesting_is_bounded_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let terms = vec!["x"; 400_000].join("+");
    std::fs::write(
        dir.path().join("huge_sum.py"),
        format!(
            "import torch
y = {terms}
z = torch.randn(3)
"
        ),
    )
    .unwrap();
    let result = scan::scan(dir.path(), &scan::Settings::default()).unwrap();
    assert_eq!(result.stats.files, 1);
    assert!(result.unparsed.is_empty(), "{:?}", result.unparsed);
    assert_eq!(result.warnings.len(), 1, "{:?}", result.warnings);
    assert!(result.warnings[0].contains("nested deeper than 100000 levels"));
}
