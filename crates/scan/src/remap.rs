//! What `from torch_npu.contrib import transfer_to_npu` remaps, per torch-npu version.
//!
//! The data is `torch-npu/transfer_to_npu.json`, read from each pinned wheel's
//! `torch_npu/contrib/transfer_to_npu.py` and checked against it by `tests/python/wheels/`;
//! `cargo xtask codegen` copies it into [`table`]. The scanner does not know which torch-npu a
//! user will run, so a finding claims a remap only when every pinned version does it
//! ([`every`]), and names the versions otherwise ([`versions`]).

mod table;

/// One torch-npu version's `transfer_to_npu` (fields as in `torch-npu/README.md`).
#[derive(Debug)]
pub struct Version {
    pub torch_npu: &'static str,
    /// The torch release it pairs with.
    pub torch: &'static str,
    /// Object → names whose "cuda" device arguments become "npu".
    pub device_arguments: &'static [(&'static str, &'static [&'static str])],
    /// Keyword arguments those wrappers rewrite.
    pub device_keywords: &'static [&'static str],
    /// Wrapped names whose positional int argument also becomes `npu:<int>`.
    pub int_device_functions: &'static [&'static str],
    /// `torch.cuda…` module → the `torch_npu` module whose `__all__` names are copied onto it.
    pub module_patches: &'static [(&'static str, &'static str)],
    /// `torch.…` attribute → the value `_init()` assigns (as `ast.unparse` writes it).
    pub assignments: &'static [(&'static str, &'static str)],
    pub deletions: &'static [&'static str],
    /// `__all__` of `torch_npu.npu` and `torch_npu.npu.amp`.
    pub npu_all: &'static [(&'static str, &'static [&'static str])],
    /// Library functions during which `torch.cuda.is_available` is torch's own CUDA check.
    pub cuda_check_kept: &'static [(&'static str, &'static str)],
}

impl Version {
    /// What `_init()` assigns to `target`, if anything.
    pub fn assigned(&self, target: &str) -> Option<&'static str> {
        self.assignments
            .iter()
            .find(|(t, _)| *t == target)
            .map(|(_, v)| *v)
    }

    /// `torch.cuda.<path>` (`is_available`, `amp.autocast`) is `torch_npu`'s under this version:
    /// `_init()` assigns it, or a `_patch_cuda` patch copies it from its `torch_npu` module's
    /// `__all__` (the longest patched module that `path` is in decides).
    pub fn cuda_name_is_npu(&self, path: &str) -> bool {
        let full = format!("torch.cuda.{path}");
        let mut prefix = full.as_str();
        loop {
            if self.assigned(prefix).is_some() {
                return true;
            }
            match prefix.rsplit_once('.') {
                Some((head, _)) => prefix = head,
                None => break,
            }
        }
        let patched_module = self
            .module_patches
            .iter()
            .filter(|(dest, _)| {
                full.strip_prefix(dest)
                    .is_some_and(|rest| rest.starts_with('.'))
            })
            .max_by_key(|(dest, _)| dest.len());
        let Some((dest, src)) = patched_module else {
            return false;
        };
        let name = full[dest.len() + 1..].split('.').next().unwrap_or_default();
        self.npu_all
            .iter()
            .any(|(m, names)| m == src && names.contains(&name))
    }

    /// `owner.name` (`torch.zeros`, `torch.Tensor.to`) has its "cuda" device arguments remapped:
    /// it is on one of the white lists `_device_wrapper` wraps, or `_init` assigns it a
    /// `_wrapper_cuda` wrapper (`torch.distributed.device_mesh.init_device_mesh`,
    /// `torch.distributed.init_process_group` through `_compose_wrappers(_wrapper_cuda, …)`).
    pub fn wraps_device_argument(&self, owner: &str, name: &str) -> bool {
        self.device_arguments
            .iter()
            .any(|(o, names)| *o == owner && names.contains(&name))
            || self
                .assigned(&format!("{owner}.{name}"))
                .is_some_and(|v| v.starts_with("_wrapper_cuda(") || v.contains("(_wrapper_cuda,"))
    }

    /// `torch.Tensor.is_cuda` is `torch.Tensor.is_npu`: true for NPU tensors.
    pub fn is_cuda_is_npu(&self) -> bool {
        self.assigned("torch.Tensor.is_cuda") == Some("torch.Tensor.is_npu")
    }

    /// `init_process_group`'s "nccl" backend becomes "hccl".
    pub fn nccl_becomes_hccl(&self) -> bool {
        self.assigned("torch.distributed.init_process_group")
            .is_some_and(|v| v.contains("_wrapper_hccl"))
    }
}

/// Every pinned version, oldest first.
pub fn all() -> &'static [Version] {
    table::VERSIONS
}

/// Whether every pinned torch-npu version satisfies `fact`.
pub fn every(fact: impl Fn(&Version) -> bool) -> bool {
    all().iter().all(fact)
}

/// The pinned versions that satisfy `fact`, as a phrase: `"every torch_npu from 2.1.0.post17 to
/// 2.14.0"`, `"torch_npu 2.6.0.post5 to 2.14.0"` when a suffix of the versions does,
/// `"torch_npu 2.6.0.post5, 2.14.0"` otherwise; `None` when none does.
pub fn versions(fact: impl Fn(&Version) -> bool) -> Option<String> {
    let all = all();
    let hits: Vec<&str> = all
        .iter()
        .filter(|v| fact(v))
        .map(|v| v.torch_npu)
        .collect();
    let (first, last) = (all.first()?.torch_npu, all.last()?.torch_npu);
    let suffix = all[all.len() - hits.len()..]
        .iter()
        .map(|v| v.torch_npu)
        .eq(hits.iter().copied());
    match hits.as_slice() {
        [] => None,
        _ if hits.len() == all.len() => Some(format!("every torch_npu from {first} to {last}")),
        [only] => Some(format!("torch_npu {only}")),
        [from, .., to] if suffix => Some(format!("torch_npu {from} to {to}")),
        _ => Some(format!("torch_npu {}", hits.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_the_pinned_versions_oldest_first() {
        let names: Vec<&str> = all().iter().map(|v| v.torch_npu).collect();
        assert_eq!(names.first(), Some(&"2.1.0.post17"));
        assert_eq!(names.last(), Some(&"2.14.0"));
        for v in all() {
            assert!(v.torch_npu.starts_with(v.torch), "{}", v.torch_npu);
        }
    }

    #[test]
    fn the_facts_the_scanner_states_hold_in_the_table() {
        // What P_DEV's capability gate and P_ENT's messages rely on.
        assert!(every(Version::is_cuda_is_npu));
        assert!(every(|v| v.cuda_name_is_npu("is_available")));
        assert!(every(|v| v.cuda_name_is_npu("device_count")));
        assert!(every(Version::nccl_becomes_hccl));
        assert!(every(
            |v| v.assigned("torch.Tensor.cuda") == Some("torch.Tensor.npu")
        ));
        // Not every torch.cuda name has an npu counterpart.
        assert!(!every(|v| v.cuda_name_is_npu("nvtx")));
        assert!(every(|v| v.cuda_name_is_npu("amp.autocast")));
        assert!(every(|v| v.cuda_name_is_npu("DoubleTensor")));
        assert!(!every(|v| v.cuda_name_is_npu("amp.no_such_name")));
        assert!(!every(|v| v.wraps_device_argument("torch", "device")));
        // Wrapped by assignment in _init: device meshes from 2.6.0.post5 (2.1.0.post17 has none),
        // init_process_group's device_id in 2.8.0.post5 and later (`_compose_wrappers`).
        let mesh = |v: &Version| {
            v.wraps_device_argument("torch.distributed.device_mesh", "init_device_mesh")
        };
        assert_eq!(
            versions(mesh).as_deref(),
            Some("torch_npu 2.6.0.post5 to 2.14.0")
        );
        let init = |v: &Version| v.wraps_device_argument("torch.distributed", "init_process_group");
        assert_eq!(
            versions(init).as_deref(),
            Some("torch_npu 2.8.0.post5 to 2.14.0")
        );
    }

    #[test]
    fn version_phrases() {
        assert_eq!(
            versions(|_| true).as_deref(),
            Some("every torch_npu from 2.1.0.post17 to 2.14.0")
        );
        assert_eq!(versions(|_| false), None);
        assert_eq!(
            versions(|v| v.torch_npu == "2.14.0").as_deref(),
            Some("torch_npu 2.14.0")
        );
        assert_eq!(
            versions(|v| v.torch_npu != "2.1.0.post17").as_deref(),
            Some("torch_npu 2.6.0.post5 to 2.14.0")
        );
    }
}
