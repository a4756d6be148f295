//! Differential tests of the fast tokenizer against the parser crate's own lexer: on every
//! input the fast tokenizer either gives up or yields exactly the reference's tokens and
//! ranges, it never accepts what the reference rejects, and it does not give up on ordinary
//! code (or it would bring no speed).

use rustpython_parser::text_size::TextRange;
use rustpython_parser::{Mode, Tok};
use scan::source::lexer::tokenize;
use std::path::{Path, PathBuf};

type Spanned = (Tok, TextRange);

fn reference(text: &str) -> Option<Vec<Spanned>> {
    rustpython_parser::lexer::lex(text, Mode::Module)
        .collect::<Result<Vec<_>, _>>()
        .ok()
}

/// What happened to one input.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Both lexers agree on every token.
    Same,
    /// The fast tokenizer gave up; the reference lexed the input.
    GaveUp,
    /// The fast tokenizer gave up; the reference fails too.
    BothFail,
}

/// Compare the two lexers on `text`; panics with a readable message on any disagreement.
fn compare(text: &str, what: &str) -> Outcome {
    let fast = tokenize(text);
    let reference = reference(text);
    match (fast, reference) {
        (None, Some(_)) => Outcome::GaveUp,
        (None, None) => Outcome::BothFail,
        (Some(fast), None) => panic!(
            "{what}: the fast tokenizer accepted input the reference rejects \
             ({} tokens)\n--- input ---\n{text:?}",
            fast.len()
        ),
        (Some(fast), Some(reference)) => {
            if fast != reference {
                let at = fast
                    .iter()
                    .zip(&reference)
                    .position(|(a, b)| a != b)
                    .unwrap_or(fast.len().min(reference.len()));
                let lo = at.saturating_sub(3);
                panic!(
                    "{what}: token streams differ at token {at} (fast has {}, reference {})\n\
                     fast:      {:?}\nreference: {:?}\n--- input ---\n{text:?}",
                    fast.len(),
                    reference.len(),
                    &fast[lo..(at + 3).min(fast.len())],
                    &reference[lo..(at + 3).min(reference.len())],
                );
            }
            Outcome::Same
        }
    }
}

fn lex_count(text: &str) -> usize {
    rustpython_parser::lexer::lex(text, Mode::Module)
        .take_while(Result::is_ok)
        .count()
}

fn python_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "py") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn repo_files() -> Vec<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = python_files(&manifest.join("tests"));
    files.extend(python_files(&manifest.join("../../assets/demo")));
    assert!(
        files.len() >= 20,
        "expected the scan fixtures and the demo project, found {} files",
        files.len()
    );
    files
}

#[test]
fn repository_python_files_agree_and_are_not_given_up() {
    let mut same = 0;
    let mut gave_up = Vec::new();
    for path in repo_files() {
        let bytes = std::fs::read(&path).unwrap();
        let decoded = scan::source::decode(&bytes);
        let what = path.display().to_string();
        match compare(&decoded.text, &what) {
            Outcome::Same => same += 1,
            Outcome::BothFail => {}
            Outcome::GaveUp => gave_up.push(what),
        }
    }
    // Every file the reference can lex is ordinary code.
    assert!(
        gave_up.is_empty(),
        "the fast tokenizer gave up on ordinary files: {gave_up:#?}"
    );
    assert!(same >= 20, "only {same} files were compared token by token");
}

/// Inputs the fast tokenizer must handle itself, each equal to the reference.
const ACCEPTED: &[&str] = &[
    "",
    "\n",
    "\n\n\n",
    "x",
    "x = 1",
    "x = 1\n",
    "   \n",
    "# only a comment",
    "# only a comment\n",
    "   # indented comment at the start\nx = 1\n",
    "x = 1\r\ny = 2\r\n",
    "x = 1\ry = 2\r",
    "x = (1,\r\n     2)\r\n",
    "if x:\r\n    y = 1\r\n# c\r\n",
    "if x:\r    y = 1\r\rz = 2",
    // Indentation, dedents to different levels, comments at every indentation.
    "if a:\n    b\n    if c:\n        d\n            # deep comment\n        e\n  # shallow comment\n    f\ng\n",
    "def f():\n    if a:\n        if b:\n            return 1\n    return 2\n",
    "class A:\n    def f(self):\n        pass\n\n\n    def g(self):\n        pass\n",
    "if a:\n\tb\n\tif c:\n\t\td\ne\n",
    "if a:\n\t  b\n",
    "if a:\n    b",
    "if a:\n    b\n        # comment deeper than the block\n",
    "if a:\n    b\n\n  \n\t\n    c\n",
    "if a:\n    \\\n    b\n",
    "\x0cx = 1\n",
    "if a:\n\x0c    b\n    \x0cc\n",
    "if a:\n    b \x0c c\n",
    // Brackets across lines and line continuations.
    "x = [\n    1,\n    2,  # two\n\n    3,\n]\n",
    "x = {\n  'a': (1,\n        2),\n  # comment in braces\n}\n",
    "f(a,\n  b)(c\n)[d\n]\n",
    "x = 1 + \\\n    2\n",
    "x = 1 + \\\r\n    2\r\n",
    "x = 1 + \\\r    2\r",
    "if a and \\\n        b:\n    pass\n",
    "x = (1 +\n\\\n2)\n",
    // Strings of every prefix and quote form.
    "'a' \"b\" '''c''' \"\"\"d\"\"\"\n",
    "'' \"\" '''''' \"\"\"\"\"\"\n",
    "r'a\\d' R'a' u'a' U'a' b'a' B'a' f'a' F'a'\n",
    "rb'a' rB'a' Rb'a' RB'a' br'a' bR'a' Br'a' BR'a'\n",
    "rf'a' rF'a' Rf'a' RF'a' fr'a' fR'a' Fr'a' FR'a'\n",
    "r\"\"\"raw\\n\"\"\" b'''bytes''' f\"\"\"{x}\"\"\"\n",
    "x = 'it\\'s' + \"say \\\"hi\\\"\" + '\\\\'\n",
    "x = '\\n\\t\\x41\\u00e9\\N{DASH}'\n",
    "x = 'a\\\nb'\n",
    "x = 'a\\\r\nb'\r\n",
    "x = 'a\\\rb'\r",
    "x = 'a\\\r\\\r\nb' '\\\\'\r",
    "x = '''a\nb\n'c' \"d\" ''\n'''\n",
    "x = \"\"\"a\r\nb\r\n\"\"\"\r\n",
    "x = \"\"\"a\rb\r\"\"\"\r",
    "x = '''ends with quote\\''''\n",
    "x = '''a'''' '\n",
    "x = \"\"\"\"quoted\"\"\"\n",
    "x = 'é' + \"日本語\" + '''😀'''  # café ☕\n",
    "x = f'{a!r:>{width}} {b[\"k\"]}' f\"{{}}\"\n",
    "x = f'''\n{a}\n'''\n",
    "x = ub\"a\"\n",
    "x = bu'a'\n",
    "x = rr'a'\n",
    "x = fb'a'\n",
    "x = 'a' 'b'\\\n'c'\n",
    // Numbers of every form.
    "0 00 0_0 1 123 1_000_000 0x1F 0X_ff 0o17 0O_7 0b1010 0B_1 0xDEAD_BEEF\n",
    "1.5 1. .5 1e3 1E3 1e+3 1e-3 1.5e3 .5e-3 1_0.0_1e1_0 0.0 00.5 09.5 1.e5\n",
    "1j 1J 1.5j .5j 1e3j 0j 00j 09j 1_0j\n",
    "123456789012345678901234567890 0xffffffffffffffffffffffff 0b1111111111111111111111111111111111111111111111111111111111111111111\n",
    "18446744073709551615 18446744073709551616 1e400 1e-400\n",
    "x = 1. if 1. else 1.5 .real\n",
    "x = 1 .real\n",
    "x[1:2, ::3, ...]\n",
    "1..real\n",
    // Operators.
    "a + b - c * d / e // f % g ** h @ i\n",
    "a += 1; b -= 1; c *= 1; d /= 1; e //= 1; f %= 1; g **= 1; h @= 1\n",
    "a &= 1; b |= 1; c ^= 1; d <<= 1; e >>= 1\n",
    "a & b | c ^ ~d << e >> f\n",
    "a < b > c <= d >= e == f != g\n",
    "a <> b\n",
    "def f(a, *args, b=1, **kw) -> int: ...\n",
    "if (n := len(a)) > 10: pass\n",
    "@decorator\n@other.thing(1)\ndef f(): pass\n",
    "x = ...\ny = ....\nz = a.b.c\n",
    "lambda x: x\n",
    "x = {**a, 'b': 1}\n",
    "print(*a, **b); x = [*a]\n",
    "a@b\n",
    "a=b==c\n",
    "x = a if b else c\n",
    "async def f():\n    await g()\n    async with a as b:\n        async for x in y:\n            yield x\n",
    "try:\n    pass\nexcept* E:\n    pass\nfinally:\n    pass\n",
    "global a\nnonlocal b\ndel c\nassert d, e\nraise F from G\n",
    "while True:\n    break\nelse:\n    continue\n",
    "from . import a\nfrom ..b import c as d\nimport e.f\n",
    "x = None or True and not False is None in []\n",
    // Soft keywords in every role.
    "match = 1\nmatch.x = 2\nprint(match)\n",
    "match x:\n    case 1:\n        pass\n    case [a, b]:\n        pass\n    case {'k': v}:\n        pass\n    case _:\n        pass\n",
    "match (x):\n    case (1 | 2) if y:\n        pass\n",
    "match x, y:\n    case a, b:\n        pass\n",
    "match(x)\nmatch[x]\nmatch: int = 1\nmatch = lambda: 1\n",
    "case = 1\ncase: int = 2\ncase(1)\n",
    "match x:\n    case lambda: 1:\n        pass\n",
    "if x:\n    match y:\n        case 1: pass\n",
    "x = match\nx = case\nx = type\n",
    "type X = int\ntype X[T] = list[T]\ntype(x)\ntype = 1\ntype.x = 2\n",
    "type type = int\ntype match = int\ntype case = int\n",
    "type X\ntype X[\n    T,\n] = int\ntype X: int = 1\n",
    "print(type(x))\nt = type(x) == int\n",
    "type X = int  # alias\n# comment\nmatch x:  # c\n    case 1:  # c\n        pass\n",
    "x = 1; match y:\n    case 1: pass\n",
    "class A:\n    type = 'a'\n    match = 'b'\n    case = 'c'\n",
    "def f(type, match, case): return type, match, case\n",
    "match x:\n    case {\n        'a': 1,\n    }:\n        pass\n",
    "match\n",
    "match x\n",
    "case\n",
    "type\n",
    "type X\n",
    "type X = \\\n    int\n",
    // Names.
    "_ __ _a a_ A1 __init__ self.x ab12_cd\n",
    "False None True and as assert async await break class continue def del elif else except\n",
    "finally for from global if import in is lambda nonlocal not or pass raise return try while with yield\n",
    "Falsey Nonee iff inn iss nott orr\n",
    // Odd but valid placements.
    "x = 1  \n",
    "x = 1\t# tab before comment\n",
    "x = 1 \\\n\n",
    "if x: pass\n# trailing comment without newline",
    "if x:\n    pass\n    # trailing indented comment without newline",
    "if x:\n    pass\n    ",
    "if x:\n    pass\n\n\n",
    "def f():\n    '''doc'''\n",
    "x = (\n)\n",
];

/// Inputs the reference rejects: the fast tokenizer must give up on each.
const REJECTED: &[&str] = &[
    "print(r'\\')\n",
    "x = 'abc\n",
    "x = 'abc",
    "x = '''abc",
    "x = 'a\rb'\n",
    "x = '\\",
    "x = (1,\n",
    "x = )\n",
    "x = ]\n",
    "x = }\n",
    "x = 1 \\ y\n",
    "x = 1 \\",
    "x = 1 \\\n",
    "x = $\n",
    "x = ?\n",
    "x = !\n",
    "x = `a`\n",
    "x = \x00\n",
    "x = \x0b\n",
    "x = 0x\n",
    "x = 0b\n",
    "x = 0o\n",
    "x = 012\n",
    "x = 0_7\n",
    "x = 1._5\n",
    "x = 1.5e_3\n",
    "x = 1.e\n",
    "x = 1.5ex\n",
    "if a:\n    b\n  c\n",
    "if a:\n  \tb\n",
    "if a:\n\tb\n        c\n",
    "if a:\n        b\n\tc\n",
];

/// Inputs the reference accepts but the fast tokenizer leaves to it.
const LEFT_TO_REFERENCE: &[&str] = &[
    "é = 1\n",
    "x = é\n",
    "naïve = 1\n",
    "x = 😀\n",
    "\u{feff}x = 1\n",
    "x = 1if y else 2\n",
    "x = 0x1for\n",
    "x = 1_\n",
    "x = 0b12\n",
    "x = 1__0\n",
    "x = 1e5j5\n",
    "x = 1e_5\n",
    "x = 1e+_3\n",
    "x = 1.real\n",
];

#[test]
fn handwritten_cases_agree_and_are_lexed_fast() {
    for (i, text) in ACCEPTED.iter().enumerate() {
        let outcome = compare(text, &format!("accepted case {i}"));
        assert_eq!(
            outcome,
            Outcome::Same,
            "accepted case {i} was given up: {text:?}"
        );
    }
}

#[test]
fn rejected_inputs_are_left_to_the_reference() {
    for (i, text) in REJECTED.iter().enumerate() {
        assert!(
            reference(text).is_none(),
            "rejected case {i} is accepted by the reference: {text:?}"
        );
        assert_eq!(
            compare(text, &format!("rejected case {i}")),
            Outcome::BothFail
        );
    }
    for (i, text) in LEFT_TO_REFERENCE.iter().enumerate() {
        assert_eq!(
            compare(text, &format!("left case {i}")),
            Outcome::GaveUp,
            "left case {i}: {text:?}"
        );
    }
}

#[test]
fn end_of_file_and_soft_keyword_contract() {
    // The stream ends with the dedents, without an end-of-file token.
    let tokens = tokenize("if a:\n    b").unwrap();
    let kinds: Vec<_> = tokens.iter().map(|(tok, _)| tok.clone()).collect();
    assert_eq!(kinds[kinds.len() - 2..], [Tok::Newline, Tok::Dedent]);
    assert!(!kinds.contains(&Tok::EndOfFile));
    // `match` is a keyword at the start of `match x:` and a name in `match = 1`.
    let tokens = tokenize("match = 1\nmatch x:\n    case 1: pass\n").unwrap();
    assert!(matches!(&tokens[0].0, Tok::Name { name } if name == "match"));
    assert!(tokens.iter().any(|(tok, _)| *tok == Tok::Match));
    assert!(tokens.iter().any(|(tok, _)| *tok == Tok::Case));
    // Strings keep their escapes as written and turn line ends into `\n`.
    let tokens = tokenize("x = '''a\\n\r\nb'''\n").unwrap();
    assert!(
        matches!(&tokens[2].0, Tok::String { value, triple_quoted: true, .. } if value == "a\\n\nb")
    );
}

/// `scan::source::parse` (fast tokenizer when it accepts) against the parser crate's own
/// `parse` (reference lexer): same body, same comments, or the same error at the same place.
fn compare_parse(text: &str, what: &str) {
    let ours = scan::source::parse(text, "t.py");
    let theirs = rustpython_parser::parse(text, Mode::Module, "t.py");
    match (ours, theirs) {
        (Ok(ours), Ok(rustpython_parser::ast::Mod::Module(module))) => {
            assert!(
                ours.body == module.body,
                "{what}: the ASTs differ\n{text:?}"
            );
            let comments: Vec<(String, TextRange)> = reference(text)
                .unwrap()
                .into_iter()
                .filter_map(|(tok, range)| match tok {
                    Tok::Comment(text) => Some((text, range)),
                    _ => None,
                })
                .collect();
            let ours: Vec<(String, TextRange)> = ours
                .comments
                .into_iter()
                .map(|c| (c.text, c.range))
                .collect();
            assert_eq!(ours, comments, "{what}: the comments differ\n{text:?}");
        }
        (Err(ours), Err(theirs)) => {
            assert_eq!(
                (ours.message, ours.offset),
                (theirs.error.to_string(), theirs.offset),
                "{what}: the syntax errors differ\n{text:?}"
            );
        }
        (ours, theirs) => panic!(
            "{what}: one side parsed and the other did not: ours ok={}, reference ok={}\n{text:?}",
            ours.is_ok(),
            theirs.is_ok()
        ),
    }
}

/// Every hand-written case, then every repository file (its first `limit` bytes, cut at a
/// character boundary).
fn cases_and_repo_files(limit: usize) -> Vec<String> {
    let mut texts: Vec<String> = ACCEPTED
        .iter()
        .chain(REJECTED)
        .chain(LEFT_TO_REFERENCE)
        .map(|s| (*s).to_owned())
        .collect();
    for path in repo_files() {
        let mut text = scan::source::decode(&std::fs::read(&path).unwrap()).text;
        if text.len() > limit {
            let cut = (0..=limit)
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            text.truncate(cut);
        }
        texts.push(text);
    }
    texts
}

#[test]
fn parse_results_equal_the_reference_parser() {
    let mut texts = cases_and_repo_files(usize::MAX);
    let originals = texts.len();
    let mut rng = fastrand::Rng::with_seed(SEED ^ 0xa57);
    for _ in 0..2_000 {
        let base = texts[rng.usize(0..originals)].clone();
        let bytes = mutate(&mut rng, base.as_bytes());
        texts.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    for (i, text) in texts.iter().enumerate() {
        compare_parse(text, &format!("input {i}"));
    }
}

const MUTATIONS: usize = 20_000;
const SEED: u64 = 0x1e_c0de_5eed;

/// Bytes that matter to a tokenizer, used for flips and insertions.
const INTERESTING: &[&[u8]] = &[
    b"'",
    b"\"",
    b"'''",
    b"\"\"\"",
    b"(",
    b")",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\t",
    b" ",
    b"\n",
    b"\r",
    b"\r\n",
    b"\\",
    b"#",
    b"0",
    b"1",
    b"_",
    b".",
    b"e",
    b"j",
    b"x",
    b"0x",
    b"f'",
    b"rb\"",
    b"match ",
    b"case ",
    b"type ",
    b":",
    b"=",
    b"!",
    b"$",
    b"\x0c",
    b"\x00",
    "é".as_bytes(),
    "😀".as_bytes(),
    b"lambda",
    b"    ",
    b"\n    ",
    b"\n\t",
];

fn mutate(rng: &mut fastrand::Rng, base: &[u8]) -> Vec<u8> {
    let mut bytes = base.to_vec();
    let edits = rng.usize(1..4);
    for _ in 0..edits {
        let at = rng.usize(0..=bytes.len());
        match rng.u8(0..6) {
            0 => bytes.truncate(at),
            1 if at < bytes.len() => bytes[at] = rng.u8(0..128),
            2 => {
                let piece = INTERESTING[rng.usize(0..INTERESTING.len())];
                bytes.splice(at..at, piece.iter().copied());
            }
            3 if at < bytes.len() => {
                let piece = INTERESTING[rng.usize(0..INTERESTING.len())];
                let end = (at + piece.len()).min(bytes.len());
                bytes.splice(at..end, piece.iter().copied());
            }
            4 if at < bytes.len() => {
                let end = (at + rng.usize(1..8)).min(bytes.len());
                bytes.drain(at..end);
            }
            _ => {
                let i = rng.usize(0..=bytes.len());
                let j = rng.usize(0..=bytes.len());
                let (lo, hi) = (i.min(j), i.max(j));
                let copy = bytes[lo..hi.min(lo + 40)].to_vec();
                bytes.splice(at..at, copy);
            }
        }
    }
    bytes
}

#[test]
fn mutated_inputs_never_disagree() {
    // Repository files are cut short so thousands of cases stay quick.
    let bases = cases_and_repo_files(3_000);
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut counts = [0usize; 3];
    for case in 0..MUTATIONS {
        let base = &bases[rng.usize(0..bases.len())];
        let bytes = mutate(&mut rng, base.as_bytes());
        let text = String::from_utf8_lossy(&bytes);
        let outcome = compare(&text, &format!("mutation {case}"));
        counts[outcome as usize] += 1;
    }
    let [same, gave_up, both_fail] = counts;
    #[allow(clippy::print_stderr, reason = "shown with --nocapture")]
    {
        eprintln!(
            "{MUTATIONS} mutations: {same} equal, {gave_up} given up, {both_fail} rejected by both"
        );
    }
    // The mutations must exercise both sides: agreement and give-ups on broken input.
    assert!(
        same > MUTATIONS / 5,
        "only {same} mutated inputs were lexed fast"
    );
    assert!(
        both_fail > MUTATIONS / 10,
        "only {both_fail} mutated inputs were rejected"
    );
    assert!(gave_up > 0, "no mutated input was left to the reference");
}

/// Agreement on a whole corpus: `NPU_SCAN_LEXER_CORPUS=/path/to/tree cargo test -p scan
/// --release --test lexer -- --ignored --nocapture`. Prints the give-up rate.
#[test]
#[ignore = "needs NPU_SCAN_LEXER_CORPUS pointing at a large Python tree"]
fn corpus_agrees() {
    let root = std::env::var_os("NPU_SCAN_LEXER_CORPUS")
        .expect("set NPU_SCAN_LEXER_CORPUS to a directory of Python files");
    let files = python_files(Path::new(&root));
    assert!(!files.is_empty(), "no .py files under {}", root.display());
    let (mut same, mut gave_up, mut both_fail) = (0usize, Vec::new(), 0usize);
    let mut bytes_total = 0usize;
    let mut bytes_given_up = 0usize;
    let texts: Vec<String> = files
        .iter()
        .map(|path| scan::source::decode(&std::fs::read(path).unwrap()).text)
        .collect();
    for (path, text) in files.iter().zip(&texts) {
        bytes_total += text.len();
        match compare(text, &path.display().to_string()) {
            Outcome::Same => same += 1,
            Outcome::GaveUp => {
                bytes_given_up += text.len();
                gave_up.push(path.display().to_string());
            }
            Outcome::BothFail => both_fail += 1,
        }
    }
    let percent = |part: usize, whole: usize| {
        100.0 * f64::from(u32::try_from(part).unwrap())
            / f64::from(u32::try_from(whole.max(1)).unwrap())
    };
    let rate = percent(gave_up.len(), files.len());
    let byte_rate = percent(bytes_given_up, bytes_total);
    // Lexing time alone, for information (meaningful in a release build).
    let started = std::time::Instant::now();
    let fast_tokens: usize = texts
        .iter()
        .filter_map(|t| tokenize(t))
        .map(|t| t.len())
        .sum();
    let fast_time = started.elapsed();
    let started = std::time::Instant::now();
    let reference_tokens: usize = texts.iter().map(|t| lex_count(t)).sum();
    let reference_time = started.elapsed();
    #[allow(clippy::print_stderr, reason = "the figures are this test's report")]
    {
        eprintln!(
            "lexing {:.1} MB: fast {fast_time:.2?} ({fast_tokens} tokens), reference \
             {reference_time:.2?} ({reference_tokens} tokens)",
            f64::from(u32::try_from(bytes_total).unwrap()) / 1e6
        );
        eprintln!(
            "{} files: {same} lexed fast and equal, {} left to the reference ({rate:.2}% of \
             files, {byte_rate:.2}% of bytes), {both_fail} rejected by both",
            files.len(),
            gave_up.len()
        );
        for path in gave_up.iter().take(20) {
            eprintln!("  left to the reference: {path}");
        }
    }
    assert!(
        rate < 5.0,
        "the fast tokenizer gives up on {rate:.2}% of the files"
    );
}
