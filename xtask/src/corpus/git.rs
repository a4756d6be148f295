//! The GitHub part of the corpus: pinned commits of public repositories, read from local bare
//! git mirrors (this machine and CI cannot reach github.com), extracted to
//! `<cache>/git/<name>-<commit12>/`.
//!
//! Only the files the scanner reads are extracted (`scan::files::entry` decides), so a mirror
//! may lack the large binary blobs of its repository. The tree is listed with `git ls-tree` and
//! the blobs are read with one `git cat-file --batch`; symlinks and submodules are left out.
//! The extracted tree is checked against the manifest's digest (see [`tree_digest`]), written
//! to a temporary directory and renamed into place with the same `.complete` marker as the
//! distributions, so a later run needs no mirror.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One pinned repository of the corpus.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Repository {
    /// The repository's name (`RoboVLMs`).
    pub name: String,
    /// `owner/name` on GitHub.
    pub repo: String,
    /// The full commit id, 40 lowercase hex digits.
    pub commit: String,
    /// The digest of the extracted tree ([`tree_digest`]).
    pub sha256: String,
    /// Globs (as `npu-scan --exclude`) of paths neither scanned nor labelled.
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl Repository {
    /// `<name>-<commit[..12]>`: the directory under `<cache>/git/` and the first component of
    /// every labelled path.
    pub fn dir_name(&self) -> String {
        format!(
            "{}-{}",
            self.name,
            &self.commit[..12.min(self.commit.len())]
        )
    }

    /// `<owner>+<name>`: the repository's directory in a mirrors directory.
    fn mirror_name(&self) -> String {
        self.repo.replace('/', "+")
    }
}

/// Why `repo` is not a valid manifest entry, if it is not.
pub fn problem(repo: &Repository) -> Option<String> {
    let plain = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    let lower_hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !plain(&repo.name) {
        return Some(format!("bad name {:?}", repo.name));
    }
    match repo.repo.split_once('/') {
        Some((owner, name)) if plain(owner) && plain(name) => {}
        _ => return Some(format!("repo {:?} is not owner/name", repo.repo)),
    }
    if !lower_hex(&repo.commit, 40) {
        return Some(format!(
            "commit {:?} is not 40 lowercase hex digits",
            repo.commit
        ));
    }
    if !lower_hex(&repo.sha256, 64) {
        return Some("has no valid sha256 (64 lowercase hex digits)".to_owned());
    }
    None
}

/// The digest of an extracted tree: sha256 over, for each file in byte order of its relative
/// `/` path, `path`, a NUL byte, the lowercase hex sha256 of its content and a newline.
/// `files` holds each path with the sha256 of its content.
pub fn tree_digest(files: &[(String, [u8; 32])]) -> String {
    let mut sorted: Vec<&(String, [u8; 32])> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut hasher = Sha256::new();
    for (path, content) in sorted {
        hasher.update(path.as_bytes());
        hasher.update(b"\0");
        hasher.update(issue_model::ids::hex(content).as_bytes());
        hasher.update(b"\n");
    }
    issue_model::ids::hex(&hasher.finalize())
}

/// Where the mirrors come from: `--git-mirrors DIR` or `$NPU_PATCHER_CORPUS_GIT_MIRRORS`.
pub fn mirrors_dir(flag: Option<&Path>) -> Option<PathBuf> {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("NPU_PATCHER_CORPUS_GIT_MIRRORS").map(PathBuf::from))
}

/// Make sure `repo` is extracted under `<cache>/git/`; return its directory. `mirrors` is the
/// mirrors directory, if one was given. Every error starts with the repository's directory name.
pub fn ensure(cache: &Path, repo: &Repository, mirrors: Option<&Path>) -> Result<PathBuf> {
    fill_cache(cache, repo, mirrors).with_context(|| repo.dir_name())
}

fn fill_cache(cache: &Path, repo: &Repository, mirrors: Option<&Path>) -> Result<PathBuf> {
    let git_cache = cache.join("git");
    let target = git_cache.join(repo.dir_name());
    if is_complete(&target, repo) {
        return Ok(target);
    }
    fs::create_dir_all(&git_cache)
        .with_context(|| format!("cannot create {}", git_cache.display()))?;
    let lock_path = git_cache.join(format!(".{}.lock", repo.dir_name()));
    let lock = fs::File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    if is_complete(&target, repo) {
        return Ok(target);
    }
    let git_dir = locate(&git_cache, repo, mirrors)?;
    let tmp = git_cache.join(format!(".tmp-{}-{}", repo.dir_name(), std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).with_context(|| format!("cannot remove {}", tmp.display()))?;
    }
    if let Err(e) = extract_checked(&git_dir, repo, &tmp) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if target.exists() {
        fs::remove_dir_all(&target)
            .with_context(|| format!("cannot remove the stale copy {}", target.display()))?;
    }
    if let Err(e) = fs::rename(&tmp, &target) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e)
            .with_context(|| format!("cannot move the extracted {} into place", repo.dir_name()));
    }
    Ok(target)
}

/// A `.complete` marker naming the manifest's digest: an older marker (another digest) means
/// the copy is re-extracted and checked again.
fn is_complete(target: &Path, repo: &Repository) -> bool {
    fs::read_to_string(target.join(".complete")).is_ok_and(|m| m.trim() == repo.sha256)
}

/// Extract `repo` from `git_dir` into `into`, check its digest and mark it complete.
fn extract_checked(git_dir: &Path, repo: &Repository, into: &Path) -> Result<()> {
    let actual = extract(git_dir, repo, into)?;
    if actual != repo.sha256 {
        bail!(
            "tree digest mismatch for {} at {}: the manifest says {}, the extracted tree has \
             {actual}; if the commit is right and the tree was checked, put that digest in \
             corpus/manifest.json",
            repo.repo,
            repo.commit,
            repo.sha256
        );
    }
    fs::write(into.join(".complete"), format!("{actual}\n"))
        .with_context(|| format!("cannot write {}", into.join(".complete").display()))
}

/// The git directory holding `repo`: in `mirrors`, else a clone in the cache, else a fresh
/// `git clone --bare --filter=blob:none` there (which needs github.com).
fn locate(git_cache: &Path, repo: &Repository, mirrors: Option<&Path>) -> Result<PathBuf> {
    let clones = git_cache.join("clones");
    let found = mirrors
        .and_then(|dir| find_mirror(dir, repo))
        .or_else(|| find_mirror(&clones, repo));
    let git_dir = match found {
        Some(dir) => dir,
        None => clone(&clones, repo, mirrors)?,
    };
    if git(
        &git_dir,
        &["cat-file", "-e", &format!("{}^{{commit}}", repo.commit)],
    )
    .is_err()
    {
        bail!(
            "the git mirror {} has no commit {} of {}: update it (`git --git-dir={} fetch \
             origin`) or fix the commit in corpus/manifest.json",
            git_dir.display(),
            repo.commit,
            repo.repo,
            git_dir.display()
        );
    }
    Ok(git_dir)
}

/// `dir/<owner>+<name>/repo` (a bare mirror, or a clone's `.git` under it) or
/// `dir/<owner>+<name>` itself, whichever is a git directory.
pub fn find_mirror(dir: &Path, repo: &Repository) -> Option<PathBuf> {
    let base = dir.join(repo.mirror_name());
    [
        base.join("repo"),
        base.join("repo/.git"),
        base.clone(),
        base.join(".git"),
    ]
    .into_iter()
    .find(|candidate| candidate.is_dir() && git(candidate, &["rev-parse", "--git-dir"]).is_ok())
}

fn clone(clones: &Path, repo: &Repository, mirrors: Option<&Path>) -> Result<PathBuf> {
    let into = clones.join(repo.mirror_name());
    let url = format!("https://github.com/{}", repo.repo);
    eprintln!("xtask: corpus: no mirror of {}: cloning {url}", repo.repo);
    let part = clones.join(format!(
        ".{}.part-{}",
        repo.mirror_name(),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&part);
    fs::create_dir_all(clones).with_context(|| format!("cannot create {}", clones.display()))?;
    let out = Command::new("git")
        .args(["clone", "--quiet", "--bare", "--filter=blob:none", &url])
        .arg(&part)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .output();
    let failure = match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_owned()),
        Err(e) => Some(format!("cannot run git: {e}")),
    };
    if let Some(why) = failure {
        let _ = fs::remove_dir_all(&part);
        let looked = mirrors.map_or_else(
            || "no mirrors directory was given".to_owned(),
            |dir| format!("none in {}", dir.display()),
        );
        bail!(
            "no git mirror of {} (for commit {}): {looked}, and cloning {url} failed ({why}). \
             Mirror it where github.com is reachable (`git clone --mirror {url} DIR/{}`) and \
             pass `--git-mirrors DIR` (or set NPU_PATCHER_CORPUS_GIT_MIRRORS=DIR)",
            repo.repo,
            repo.commit,
            repo.mirror_name()
        );
    }
    fs::rename(&part, &into)
        .with_context(|| format!("cannot move the clone to {}", into.display()))?;
    Ok(into)
}

/// Run `git --git-dir=<git_dir> <args>`; its stdout, or an error with its stderr.
fn git(git_dir: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run git: is it installed?")?;
    if !out.status.success() {
        bail!(
            "`git --git-dir={} {}` failed: {}",
            git_dir.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// A file of the commit's tree that the scanner reads.
#[derive(Debug, PartialEq, Eq)]
struct Wanted {
    rel: String,
    blob: String,
}

/// The regular files of `listing` (`git ls-tree -r -z` output) that the scanner reads and the
/// manifest does not exclude.
fn wanted(listing: &[u8], repo: &Repository) -> Result<Vec<Wanted>> {
    let exclude = scan::files::exclude_set(&repo.exclude)
        .with_context(|| format!("{}: a bad exclude glob in corpus/manifest.json", repo.repo))?;
    let mut files = Vec::new();
    for record in listing.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let text = std::str::from_utf8(record).map_err(|_| {
            anyhow::anyhow!(
                "a path of {} is not UTF-8: {}",
                repo.repo,
                String::from_utf8_lossy(record)
            )
        })?;
        let Some((meta, rel)) = text.split_once('\t') else {
            bail!("unexpected `git ls-tree` line {text:?}");
        };
        let mut meta = meta.split(' ');
        let (Some(mode), Some(kind), Some(blob)) = (meta.next(), meta.next(), meta.next()) else {
            bail!("unexpected `git ls-tree` line {text:?}");
        };
        // Symlinks (120000) and submodules (160000) are not files of this tree.
        let regular = kind == "blob" && matches!(mode, "100644" | "100755" | "100664");
        // Excluded paths (code reserved elsewhere, data files) are not extracted at all.
        if regular
            && scan::files::entry(Path::new(""), rel).is_some()
            && !super::labels::excluded(&exclude, rel)
        {
            files.push(Wanted {
                rel: rel.to_owned(),
                blob: blob.to_owned(),
            });
        }
    }
    Ok(files)
}

/// Write the wanted files of `repo`'s commit under `into` (created); return the tree digest.
fn extract(git_dir: &Path, repo: &Repository, into: &Path) -> Result<String> {
    let listing = git(
        git_dir,
        &["ls-tree", "-r", "-z", "--full-tree", &repo.commit],
    )?;
    let files = wanted(&listing, repo)?;
    fs::create_dir_all(into).with_context(|| format!("cannot create {}", into.display()))?;
    let mut digests = Vec::with_capacity(files.len());
    read_blobs(git_dir, repo, &files, |file, content| {
        let Some(entry) = scan::files::entry(into, &file.rel) else {
            bail!("{} has an unsafe path {}", repo.repo, file.rel);
        };
        if let Some(parent) = entry.path.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        fs::write(&entry.path, content)
            .with_context(|| format!("cannot write {}", entry.path.display()))?;
        digests.push((file.rel.clone(), Sha256::digest(content).into()));
        Ok(())
    })?;
    Ok(tree_digest(&digests))
}

/// Feed every blob id to one `git cat-file --batch` and hand each file with its content to
/// `each`, in order. A blob the mirror lacks is an error naming the file.
fn read_blobs(
    git_dir: &Path,
    repo: &Repository,
    files: &[Wanted],
    mut each: impl FnMut(&Wanted, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot run git cat-file: is git installed?")?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        bail!("git cat-file started without its pipes");
    };
    let request: String = files.iter().flat_map(|f| [f.blob.as_str(), "\n"]).collect();
    // A thread writes the requests while this one reads, so neither pipe fills up and blocks.
    let writer = std::thread::spawn(move || stdin.write_all(request.as_bytes()));
    let mut out = BufReader::new(stdout);
    let result = files.iter().try_for_each(|file| {
        let content = next_blob(&mut out)
            .with_context(|| format!("cannot read {} from {}", file.rel, git_dir.display()))?;
        let Some(content) = content else {
            bail!(
                "the git mirror {} lacks the blob {} of {} in {} (a partial mirror): make a \
                 whole one (`git clone --mirror https://github.com/{}`)",
                git_dir.display(),
                file.blob,
                file.rel,
                repo.repo,
                repo.repo
            );
        };
        each(file, &content)
    });
    drop(out);
    let _ = writer.join();
    let _ = child.wait();
    result
}

/// The next answer of `git cat-file --batch`: the content, or `None` for a missing object.
fn next_blob(out: &mut impl BufRead) -> Result<Option<Vec<u8>>> {
    let mut header = String::new();
    out.read_line(&mut header)?;
    let header = header.trim_end();
    if header.ends_with(" missing") {
        return Ok(None);
    }
    let mut fields = header.split(' ');
    let size = match (fields.next(), fields.next(), fields.next()) {
        (Some(_), Some("blob"), Some(size)) => size.parse::<usize>().ok(),
        _ => None,
    };
    let Some(size) = size else {
        bail!("unexpected answer {header:?}");
    };
    let mut content = vec![0u8; size + 1];
    out.read_exact(&mut content)?;
    content.pop(); // the newline after the content
    Ok(Some(content))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository(commit: &str, sha256: &str) -> Repository {
        Repository {
            name: "tiny".to_owned(),
            repo: "someone/tiny".to_owned(),
            commit: commit.to_owned(),
            sha256: sha256.to_owned(),
            exclude: Vec::new(),
        }
    }

    #[test]
    fn the_tree_digest_is_the_documented_one() {
        // Computed independently with Python:
        //   import hashlib
        //   files = {b"b.py": b"x = 1\n", b"a/c.yaml": b"k: v\n", b"a.py": b""}
        //   text = b"".join(p + b"\0" + hashlib.sha256(c).hexdigest().encode() + b"\n"
        //                   for p, c in sorted(files.items()))
        //   hashlib.sha256(text).hexdigest()
        // The paths go in byte order: a.py, a/c.yaml, b.py ("." sorts before "/").
        let files: Vec<(String, [u8; 32])> = [
            ("b.py", &b"x = 1\n"[..]),
            ("a/c.yaml", b"k: v\n"),
            ("a.py", b""),
        ]
        .into_iter()
        .map(|(p, c)| (p.to_owned(), Sha256::digest(c).into()))
        .collect();
        assert_eq!(
            tree_digest(&files),
            "681e288b1228fbfdd2bb1ccba62a9dc9a942bfdf883adc636dca8f5150d63c3e"
        );
        assert_eq!(
            tree_digest(&[]),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_manifest_entry_must_be_well_formed() {
        let good = repository(&"a".repeat(40), &"b".repeat(64));
        assert_eq!(problem(&good), None);
        assert_eq!(good.dir_name(), "tiny-aaaaaaaaaaaa");
        let mut bad = good.clone();
        bad.commit = "A".repeat(40);
        assert!(problem(&bad).is_some_and(|p| p.contains("commit")));
        let mut bad = good.clone();
        bad.repo = "../tiny".to_owned();
        assert!(problem(&bad).is_some_and(|p| p.contains("owner/name")));
        let mut bad = good;
        bad.sha256 = "b".repeat(63);
        assert!(problem(&bad).is_some_and(|p| p.contains("sha256")));
    }

    #[test]
    fn only_regular_files_the_scanner_reads_are_wanted() {
        let listing = b"100644 blob 1111\ta/m.py\x00100755 blob 2222\trun.PY\x00\
            100644 blob 3333\tweights.bin\x00120000 blob 4444\tlink.py\x00\
            160000 commit 5555\tsub\x00100644 blob 6666\tconf/c.yml\x00";
        let got = wanted(listing, &repository(&"a".repeat(40), &"b".repeat(64))).unwrap();
        let rels: Vec<&str> = got.iter().map(|w| w.rel.as_str()).collect();
        assert_eq!(rels, ["a/m.py", "run.PY", "conf/c.yml"]);
        assert_eq!(got[0].blob, "1111");
    }

    fn run_git(args: &[&str], dir: &Path) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(["-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn git_available() -> bool {
        Command::new("git")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// A bare repository at `<mirrors>/someone+tiny/repo` with one commit; returns the commit.
    fn tiny_mirror(mirrors: &Path, work: &Path) -> String {
        let bare = mirrors.join("someone+tiny/repo");
        fs::create_dir_all(&bare).unwrap();
        run_git(&["init", "--quiet", "--bare", "."], &bare);
        fs::create_dir_all(work.join("pkg")).unwrap();
        fs::write(work.join("pkg/a.py"), "import torch\n").unwrap();
        fs::write(work.join("conf.yaml"), "device: cuda\n").unwrap();
        fs::write(work.join("model.bin"), [0u8, 1, 2]).unwrap();
        let g = format!("--git-dir={}", bare.display());
        let w = format!("--work-tree={}", work.display());
        run_git(&[&g, &w, "add", "-A"], work);
        run_git(&[&g, &w, "commit", "--quiet", "-m", "one"], work);
        run_git(&[&g, "rev-parse", "HEAD"], work)
    }

    /// A temporary directory with [`tiny_mirror`] under `mirrors/` and an empty `cache/`: the
    /// directory (removed when dropped), the two paths and the commit. `None`, said on stderr,
    /// where git is not installed.
    fn tiny_setup() -> Option<(tempfile::TempDir, PathBuf, PathBuf, String)> {
        if !git_available() {
            eprintln!("skipped: git is not installed");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let (mirrors, cache) = (dir.path().join("mirrors"), dir.path().join("cache"));
        let commit = tiny_mirror(&mirrors, &dir.path().join("work"));
        Some((dir, mirrors, cache, commit))
    }

    /// Remove the loose object of `path` at `commit` from `bare`, as a partial mirror lacks it.
    fn drop_blob(bare: &Path, commit: &str, path: &str) {
        let blob = run_git(
            &[
                &format!("--git-dir={}", bare.display()),
                "rev-parse",
                &format!("{commit}:{path}"),
            ],
            bare,
        );
        fs::remove_file(bare.join("objects").join(&blob[..2]).join(&blob[2..])).unwrap();
    }

    #[test]
    fn a_commit_is_extracted_from_a_bare_mirror_and_checked() {
        let Some((_dir, mirrors, cache, commit)) = tiny_setup() else {
            return;
        };
        let bare = mirrors.join("someone+tiny/repo");
        // The binary blob is not wanted: a mirror without it is enough.
        drop_blob(&bare, &commit, "model.bin");
        let expected = tree_digest(&[
            (
                "pkg/a.py".to_owned(),
                Sha256::digest(b"import torch\n").into(),
            ),
            (
                "conf.yaml".to_owned(),
                Sha256::digest(b"device: cuda\n").into(),
            ),
        ]);

        let wrong = repository(&commit, &"0".repeat(64));
        let err = format!("{:#}", ensure(&cache, &wrong, Some(&mirrors)).unwrap_err());
        assert!(
            err.contains("someone/tiny")
                && err.contains(&"0".repeat(64))
                && err.contains(&expected),
            "{err}"
        );
        assert!(!cache.join("git").join(wrong.dir_name()).exists());

        let good = repository(&commit, &expected);
        let target = ensure(&cache, &good, Some(&mirrors)).unwrap();
        assert_eq!(
            target,
            cache.join("git").join(format!("tiny-{}", &commit[..12]))
        );
        assert_eq!(
            fs::read_to_string(target.join("pkg/a.py")).unwrap(),
            "import torch\n"
        );
        assert!(target.join("conf.yaml").exists() && !target.join("model.bin").exists());
        // Complete: no mirror needed any more.
        fs::remove_dir_all(&mirrors).unwrap();
        assert_eq!(ensure(&cache, &good, None).unwrap(), target);
    }

    #[test]
    fn a_missing_wanted_blob_or_commit_names_the_repository() {
        let Some((_dir, mirrors, cache, commit)) = tiny_setup() else {
            return;
        };
        // The layout without `repo/`: the mirror directory itself is the git directory.
        fs::rename(mirrors.join("someone+tiny/repo"), mirrors.join("flat")).unwrap();
        fs::remove_dir(mirrors.join("someone+tiny")).unwrap();
        fs::rename(mirrors.join("flat"), mirrors.join("someone+tiny")).unwrap();
        let bare = mirrors.join("someone+tiny");

        let absent = repository(&"f".repeat(40), &"0".repeat(64));
        let err = format!("{:#}", ensure(&cache, &absent, Some(&mirrors)).unwrap_err());
        assert!(
            err.contains("someone/tiny") && err.contains(&"f".repeat(40)),
            "{err}"
        );

        drop_blob(&bare, &commit, "pkg/a.py");
        let err = format!(
            "{:#}",
            ensure(
                &cache,
                &repository(&commit, &"0".repeat(64)),
                Some(&mirrors)
            )
            .unwrap_err()
        );
        assert!(
            err.starts_with(&format!("tiny-{}: ", &commit[..12]))
                && err.contains("lacks the blob")
                && err.contains("pkg/a.py in someone/tiny"),
            "{err}"
        );
    }

    #[test]
    fn without_a_mirror_the_error_says_how_to_make_one() {
        if !git_available() {
            eprintln!("skipped: git is not installed");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut repo = repository(&"a".repeat(40), &"0".repeat(64));
        // A repository that cannot exist, so the clone fails online too.
        repo.repo = "npu-patcher-invalid-owner-/no-such-repo".to_owned();
        let err = format!(
            "{:#}",
            ensure(dir.path(), &repo, Some(dir.path())).unwrap_err()
        );
        assert!(
            err.contains(&"a".repeat(40))
                && err.contains(
                    "git clone --mirror https://github.com/npu-patcher-invalid-owner-/no-such-repo"
                )
                && err.contains("--git-mirrors DIR"),
            "{err}"
        );
    }
}
