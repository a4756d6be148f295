//! The shared error printer and color choice of the command-line tools.

use cli_support::{ColorChoice, error_chain};

#[derive(Debug, thiserror::Error)]
#[error("cannot read `a.json`")]
struct Outer(#[source] std::io::Error);

#[test]
fn every_cause_gets_its_line() {
    let e = Outer(std::io::Error::other("disk on fire"));
    assert_eq!(
        error_chain("npu-x", &e, false),
        "npu-x: error: cannot read `a.json`\n  caused by: disk on fire\n"
    );
    assert!(error_chain("npu-x", &e, true).starts_with("npu-x: \x1b[1;31merror\x1b[0m: "));
}

#[test]
fn auto_colors_a_terminal_without_no_color() {
    assert!(ColorChoice::Auto.decide(true, false));
    assert!(!ColorChoice::Auto.decide(true, true));
    assert!(!ColorChoice::Auto.decide(false, false));
    assert!(ColorChoice::Always.decide(false, true));
    assert!(!ColorChoice::Never.decide(true, false));
}
