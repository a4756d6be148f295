//! Distributed launch commands (`torchrun`, `python -m torch.distributed.run`, `accelerate
//! launch`, `deepspeed`, or a shell script that runs one): what a multi-card run needs around
//! them. The command itself is never changed.
//!
//! - The card list `ASCEND_RT_VISIBLE_DEVICES` must hold at least one card per process of the
//!   node (`--nproc_per_node`): `torch_npu` gives each rank the card of its local rank, so fewer
//!   cards than processes is an error before anything starts.
//! - A multi-node command (`--nnodes` other than 1, `--master_addr`, `--rdzv_endpoint`,
//!   `--node_rank`, accelerate's `--num_machines`, deepspeed's `--hostfile`) without
//!   `HCCL_IF_IP` or `HCCL_SOCKET_IFNAME` gets a warning: they choose the network interface
//!   HCCL connects the nodes over.
//! - torchrun keeps the ranks apart: unless the command or the caller chose otherwise,
//!   `PET_TEE=3` (torchrun's `--tee 3`: each rank's lines carry its rank prefix in the console
//!   and the log) and `PET_LOG_DIR` (`--log-dir`: one stdout/stderr file per rank beside the log).
//! - Emulated, each rank of the node gets its own emulated card (`NPU_EMULATOR_DEVICE_COUNT`) and
//!   the emulated hccl talks over loopback on one node (`GLOO_SOCKET_IFNAME=lo`).

use crate::env::Plan;
use cli_support::launcher::{self, LaunchCommand};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

/// The launcher of `command`, directly or in the shell script it runs (its first launcher line),
/// read as `npu-verify` reads it ([`cli_support::launcher`]).
pub fn parse(command: &[OsString], project: &Path) -> Option<LaunchCommand> {
    let words: Vec<String> = command
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    if let Some(found) = launcher::parse(&words) {
        return Some(found);
    }
    let path = Path::new(launcher::script_of(&words)?);
    let path = if path.is_absolute() {
        path.to_owned()
    } else {
        project.join(path)
    };
    launcher::parse_script(&std::fs::read_to_string(path).ok()?)
}

/// The cards `ASCEND_RT_VISIBLE_DEVICES` makes visible: the ids read before the first space or
/// bad id (NPU-FACTS.md, "`torch_npu` basics").
pub fn visible_cards(value: &str) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::new();
    for token in value.split(',') {
        match token.parse::<u32>() {
            Ok(id) if token.trim() == token && ids.last().is_none_or(|p| id > *p) => ids.push(id),
            _ => break,
        }
    }
    ids
}

/// An error when the card list holds fewer cards than the node's processes; else the warnings.
pub fn check(
    launch: &LaunchCommand,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    if let (Some(nproc), Some(visible)) = (launch.processes(), env("ASCEND_RT_VISIBLE_DEVICES")) {
        let cards = visible_cards(&visible);
        if (cards.len() as u64) < u64::from(nproc) {
            let want: Vec<String> = (0..nproc).map(|i| i.to_string()).collect();
            return Err(format!(
                "ASCEND_RT_VISIBLE_DEVICES=`{visible}` makes {} card{} visible, but the {} command starts {nproc} \
                 processes on this node, one per card; list {nproc} cards (e.g. ASCEND_RT_VISIBLE_DEVICES={}) or \
                 start {} process{} (--nproc_per_node {})",
                cards.len(),
                if cards.len() == 1 { "" } else { "s" },
                launch.launcher.name(),
                want.join(","),
                cards.len(),
                if cards.len() == 1 { "" } else { "es" },
                cards.len(),
            ));
        }
    }
    if launch.multi_node() && env("HCCL_IF_IP").is_none() && env("HCCL_SOCKET_IFNAME").is_none() {
        notes.push(
            "a multi-node launch and neither HCCL_IF_IP nor HCCL_SOCKET_IFNAME is set: set \
             HCCL_SOCKET_IFNAME to the network interface the nodes reach each other on (or HCCL_IF_IP to \
             this node's address) on every node"
                .to_owned(),
        );
    }
    Ok(notes)
}

/// The environment a distributed launch gets (see the module documentation); `ranks_dir` is
/// where torchrun writes one log per rank.
pub fn apply(
    launch: &LaunchCommand,
    plan: &mut Plan,
    ranks_dir: &Path,
    emulated: bool,
    current: &BTreeMap<OsString, OsString>,
) {
    let unset = |plan: &Plan, name: &str| {
        let key = OsString::from(name);
        !plan.changes.contains_key(&key) && !current.contains_key(&key)
    };
    if launch.launcher == launcher::Launcher::Torchrun {
        let chosen =
            launch.has_option(&["--tee", "--redirects", "-r", "-t", "--log-dir", "--log_dir"]);
        if !chosen && unset(plan, "PET_TEE") && unset(plan, "PET_LOG_DIR") {
            plan.changes.insert("PET_TEE".into(), Some("3".into()));
            plan.changes
                .insert("PET_LOG_DIR".into(), Some(ranks_dir.as_os_str().to_owned()));
        }
    }
    if emulated {
        if let Some(nproc) = launch.processes()
            && unset(plan, "NPU_EMULATOR_DEVICE_COUNT")
        {
            plan.changes.insert(
                "NPU_EMULATOR_DEVICE_COUNT".into(),
                Some(nproc.to_string().into()),
            );
        }
        if !launch.multi_node() && unset(plan, "GLOO_SOCKET_IFNAME") {
            plan.changes
                .insert("GLOO_SOCKET_IFNAME".into(), Some("lo".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<OsString> {
        s.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn launchers_and_their_process_counts_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let found = parse(&words("torchrun --nproc_per_node 8 train.py"), dir.path()).unwrap();
        assert_eq!(
            (found.launcher.name(), found.processes(), found.multi_node()),
            ("torchrun", Some(8), false)
        );
        let found = parse(
            &words("python -m torch.distributed.run --nproc-per-node=2 --nnodes 2 --node_rank 0 train.py"),
            dir.path(),
        )
        .unwrap();
        assert_eq!((found.processes(), found.multi_node()), (Some(2), true));
        let found = parse(
            &words("accelerate launch --num_processes 4 train.py"),
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            (found.launcher.name(), found.processes()),
            ("accelerate", Some(4))
        );
        assert!(parse(&words("python train.py"), dir.path()).is_none());
        std::fs::write(
            dir.path().join("run.sh"),
            "#!/bin/bash\n# torchrun --nproc_per_node 16 x.py\nexec bash migrate_to_cloudrobo/train.sh torchrun --standalone --nproc_per_node 4 train.py\n",
        )
        .unwrap();
        let found = parse(&words("bash run.sh"), dir.path()).unwrap();
        assert_eq!(found.processes(), Some(4));
    }

    #[test]
    fn fewer_cards_than_processes_is_an_error() {
        let launch =
            launcher::parse(&["torchrun".into(), "--nproc_per_node".into(), "4".into()]).unwrap();
        let env = |v: &'static str| {
            move |name: &str| (name == "ASCEND_RT_VISIBLE_DEVICES").then(|| v.to_owned())
        };
        let err = check(&launch, &env("0,1")).unwrap_err();
        assert!(
            err.contains("makes 2 cards visible") && err.contains("starts 4 processes"),
            "{err}"
        );
        assert!(err.contains("ASCEND_RT_VISIBLE_DEVICES=0,1,2,3"), "{err}");
        // The runtime stops reading at a space: "0, 1,2,3" is one card.
        assert!(
            check(&launch, &env("0, 1,2,3"))
                .unwrap_err()
                .contains("makes 1 card visible")
        );
        assert_eq!(check(&launch, &env("0,1,2,3,4,5,6,7")), Ok(Vec::new()));
        assert_eq!(check(&launch, &|_| None), Ok(Vec::new()));
    }

    #[test]
    fn multi_node_without_an_interface_is_warned_about() {
        let launch =
            launcher::parse(&["torchrun".into(), "--nnodes=2".into(), "train.py".into()]).unwrap();
        let notes = check(&launch, &|_| None).unwrap();
        assert!(notes[0].contains("HCCL_SOCKET_IFNAME"), "{notes:?}");
        let set = |name: &str| (name == "HCCL_SOCKET_IFNAME").then(|| "eth0".to_owned());
        assert!(check(&launch, &set).unwrap().is_empty());
    }

    #[test]
    fn torchrun_keeps_ranks_apart_unless_told_otherwise() {
        let launch =
            launcher::parse(&["torchrun".into(), "--nproc_per_node".into(), "2".into()]).unwrap();
        let mut plan = Plan::default();
        apply(
            &launch,
            &mut plan,
            Path::new("/logs/r"),
            true,
            &BTreeMap::new(),
        );
        assert_eq!(plan.changes[&OsString::from("PET_TEE")], Some("3".into()));
        assert_eq!(
            plan.changes[&OsString::from("PET_LOG_DIR")],
            Some("/logs/r".into())
        );
        assert_eq!(
            plan.changes[&OsString::from("NPU_EMULATOR_DEVICE_COUNT")],
            Some("2".into())
        );
        let teed = launcher::parse(&["torchrun".into(), "--tee".into(), "1".into()]).unwrap();
        let mut plan = Plan::default();
        apply(
            &teed,
            &mut plan,
            Path::new("/logs/r"),
            false,
            &BTreeMap::new(),
        );
        assert!(plan.changes.is_empty(), "{plan:?}");
    }
}
