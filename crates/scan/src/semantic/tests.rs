//! Tests of the semantic model.

use super::*;

#[test]
fn relative_imports_resolve() {
    let s = Semantic::new("pkg/models/policy.py");
    assert_eq!(
        s.import_from_module(1, Some("heads")).as_deref(),
        Some("pkg.models.heads")
    );
    assert_eq!(
        s.import_from_module(2, Some("utils")).as_deref(),
        Some("pkg.utils")
    );
    assert_eq!(s.import_from_module(1, None).as_deref(), Some("pkg.models"));
    assert_eq!(s.import_from_module(4, None), None);
    let init = Semantic::new("pkg/__init__.py");
    assert_eq!(
        init.import_from_module(1, Some("a")).as_deref(),
        Some("pkg.a")
    );
}

/// The comparisons that build nothing agree with comparing what `resolve` builds.
#[test]
fn comparisons_agree_with_resolve() {
    let text = "import torch as th\n\
        from torch import nn, randn\n\
        import torch.nn.functional as F\n\
        th\nth.cuda\nth.cuda.is_available\nnn.Linear\nF.relu\nrandn\nx.cuda\nth.x().y\n";
    let parsed = crate::source::parse(text, "m.py").unwrap();
    let mut sem = Semantic::new("m.py");
    sem.prebind_module(&parsed.body);
    let names = [
        "",
        "t",
        "torch",
        "torch.",
        "torch.c",
        "torch.cuda",
        "torch.cuda.",
        "torch.cuda.is_available",
        "torch.cuda.is_available.x",
        "torch.nn",
        "torch.nn.Linear",
        "torch.nn.functional.relu",
        "torch.randn",
        "torch.nn.functional",
        "th",
        "x.cuda",
    ];
    let mut resolved = 0;
    for stmt in &parsed.body {
        let Stmt::Expr(e) = stmt else { continue };
        let q = sem.resolve(&e.value);
        resolved += usize::from(q.is_some());
        for name in names {
            assert_eq!(
                sem.resolves_to(&e.value, name),
                q.as_deref() == Some(name),
                "{q:?} is {name}"
            );
            assert_eq!(
                sem.resolves_with_prefix(&e.value, name),
                q.as_deref().is_some_and(|q| q.starts_with(name)),
                "{q:?} starts with {name}"
            );
            assert_eq!(
                sem.matches(&e.value, &[name, "torch.cuda"]),
                q.as_deref().is_some_and(|q| q == name || q == "torch.cuda"),
                "{q:?} in [{name}, torch.cuda]"
            );
        }
    }
    assert_eq!(resolved, 6);
}

/// `torch` resolves in a file that never imports it (a snippet, a forgotten import), and
/// `nn`/`F`/`np` resolve only where a star import may have brought them.
#[test]
fn conventional_names_resolve_without_an_import() {
    let resolve_all = |text: &str| {
        let parsed = crate::source::parse(text, "m.py").unwrap();
        let mut sem = Semantic::new("m.py");
        sem.prebind_module(&parsed.body);
        parsed
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::Expr(e) => Some(sem.resolve(&e.value)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        resolve_all("torch.cuda.synchronize\nnn.Linear\nF.relu\n"),
        [Some("torch.cuda.synchronize".to_owned()), None, None]
    );
    assert_eq!(
        resolve_all("from common import *\nnn.Linear\nF.relu\nnp.float64\nG.x\n"),
        [
            Some("torch.nn.Linear".to_owned()),
            Some("torch.nn.functional.relu".to_owned()),
            Some("numpy.float64".to_owned()),
            None
        ]
    );
    assert_eq!(
        resolve_all("import jax.numpy as np\nfrom common import *\nnp.float64\n"),
        [Some("jax.numpy.float64".to_owned())]
    );
}
