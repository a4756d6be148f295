//! Tidy: every file under `assets/` is embedded in the binary, byte for byte, and nothing else.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path.strip_prefix(root).unwrap();
            let key = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            out.insert(key, fs::read(&path).unwrap());
        }
    }
}

#[test]
fn every_file_under_assets_is_embedded() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets");
    let mut on_disk = BTreeMap::new();
    walk(&root, &root, &mut on_disk);
    assert!(on_disk.contains_key("templates/train.sh"));

    let mut embedded: Vec<String> = patch_assets::catalog::embedded_files();
    embedded.sort();
    let disk_paths: Vec<&String> = on_disk.keys().collect();
    let embedded_refs: Vec<&String> = embedded.iter().collect();
    assert_eq!(
        embedded_refs, disk_paths,
        "the embedded assets differ from assets/ on disk; rebuild (build.rs reruns when assets/ changes)"
    );
    for (path, bytes) in &on_disk {
        assert_eq!(
            patch_assets::get(path),
            Some(bytes.as_slice()),
            "{path}: embedded bytes differ from the file on disk"
        );
    }
}
