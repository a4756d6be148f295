#!/usr/bin/env python3
"""Builds the bundle's `bin/` for this machine, offline, from its own sources.

`source/` holds the workspace (only what the build reads) and `source/vendor/` every crate it
depends on, with `source/.cargo/config.toml` pointing cargo there: the build needs this
machine's cargo and no network. It runs

    cargo build --release --offline --locked -p <each tool> --target-dir <dir>

in `source/`, then copies the five binaries into `bin/<machine>/` (`bin/aarch64/` on an aarch64
machine: the architecture as `platform.machine()` names it; each replaced in one rename), writes
the host's target triple to `bin/<machine>/TARGET.txt`, and writes the `bin/<binary>` scripts that
run the binary of the machine they run on. Usage: `bash build.sh [--jobs N] [--target-dir DIR]`.
The default target dir, `source/target` (about 1 GB of intermediate files), is removed after a
successful build; one given by `--target-dir` or `$CARGO_TARGET_DIR` is kept. Python 3.8+.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLE = os.path.dirname(HERE)
SOURCE = os.path.join(BUNDLE, "source")
BIN = os.path.join(BUNDLE, "bin")
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import bundle_check  # noqa: E402

# (cargo package, binary name): the binaries of bin/<machine>/.
BINARIES = @BINARIES@
# bin/<binary>: runs bin/<machine>/<binary> for the machine it runs on (`@BINARY@` is the binary).
DISPATCHER = @DISPATCHER@
INSTALL_HINT = (
    "install Rust %(v)s or newer with rustup (https://rustup.rs: `curl --proto '=https' --tlsv1.2 -sSf "
    "https://sh.rustup.rs | sh -s -- --default-toolchain %(v)s`, or `rustup toolchain install %(v)s` "
    "where rustup is present); without network, copy the standalone installer "
    "rust-%(v)s-<arch>-unknown-linux-gnu.tar.xz (https://forge.rust-lang.org/infra/other-installation-methods.html) "
    "to this machine and run its install.sh"
)


def fail(message):
    sys.stderr.write("build.sh: error: %s\n" % message)
    return 1


def required_rust():
    """The workspace's `rust-version` (e.g. "1.95")."""
    path = os.path.join(SOURCE, "Cargo.toml")
    with open(path) as handle:
        found = re.search(r'(?m)^rust-version\s*=\s*"([0-9.]+)"', handle.read())
    if not found:
        raise ValueError("%s names no rust-version" % path)
    return found.group(1)


def version_of(tool):
    """(1, 95, 0) from `tool --version`, or None when it does not run."""
    try:
        out = subprocess.run([tool, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\b(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in found.groups()) if found else None


def find_cargo():
    candidates = [os.environ.get("CARGO"), shutil.which("cargo"),
                  os.path.join(os.path.expanduser("~"), ".cargo", "bin", "cargo")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_rustc(cargo):
    if os.environ.get("RUSTC"):
        return os.environ["RUSTC"]
    sibling = os.path.join(os.path.dirname(cargo), "rustc")
    return shutil.which("rustc") or (sibling if os.path.isfile(sibling) else None)


def host_triple(rustc):
    try:
        out = subprocess.run([rustc, "-vV"], stdout=subprocess.PIPE, universal_newlines=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"(?m)^host:\s*(\S+)", out)
    return found.group(1) if found else None


def install(built, folder, name):
    """Copy `built` to <folder>/<name> through a temporary file and one rename."""
    final = os.path.join(folder, name)
    partial = os.path.join(folder, ".%s.partial" % name)
    shutil.copyfile(built, partial)
    os.chmod(partial, 0o755)
    os.replace(partial, final)


def write_text(path, text, mode=0o644):
    partial = path + ".partial"
    with open(partial, "w") as handle:
        handle.write(text)
    os.chmod(partial, mode)
    os.replace(partial, path)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="build.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", "-j", type=int, help="parallel rustc jobs (cargo's default: one per CPU)")
    parser.add_argument("--target-dir", help="cargo's target dir, kept after the build "
                        "(default: $CARGO_TARGET_DIR, or source/target, removed after a successful build)")
    args = parser.parse_args(argv)

    if not os.path.isfile(os.path.join(SOURCE, "Cargo.lock")) or not os.path.isdir(os.path.join(SOURCE, "vendor")):
        return fail("%s lacks the workspace sources or vendor/; unpack the whole release tarball again" % SOURCE)
    need = required_rust()
    hint = INSTALL_HINT % {"v": need}
    cargo = find_cargo()
    if cargo is None:
        return fail("cargo is not installed (the build needs Rust %s or newer); %s" % (need, hint))
    rustc = find_rustc(cargo)
    wanted = tuple(int(x) for x in need.split("."))
    for tool in (cargo, rustc):
        have = version_of(tool) if tool else None
        if have is None:
            return fail("%s does not run (the build needs cargo and rustc %s or newer); %s"
                        % (tool or "rustc", need, hint))
        if have[:len(wanted)] < wanted:
            return fail("%s is version %s and the build needs %s or newer; %s"
                        % (tool, ".".join(map(str, have)), need, hint))
    chosen = args.target_dir or os.environ.get("CARGO_TARGET_DIR")
    target_dir = os.path.abspath(chosen or os.path.join(SOURCE, "target"))
    command = [cargo, "build", "--release", "--offline", "--locked", "--target-dir", target_dir]
    for package, _ in BINARIES:
        command += ["-p", package]
    if args.jobs:
        command += ["--jobs", str(args.jobs)]
    env = dict(os.environ, CARGO_NET_OFFLINE="true")
    # A target chosen elsewhere would put the binaries out of reach; this build is for this machine.
    env.pop("CARGO_BUILD_TARGET", None)
    sys.stderr.write("build.sh: building bin/ with %s (offline) in %s\n" % (cargo, SOURCE))
    started = time.time()
    if subprocess.call(command, cwd=SOURCE, env=env) != 0:
        return fail("the build failed (cargo's messages are above); the command was: %s (in %s)"
                    % (" ".join(command), SOURCE))
    folder = os.path.join(BIN, bundle_check.machine_arch())
    os.makedirs(folder, exist_ok=True)
    for _, name in BINARIES:
        built = os.path.join(target_dir, "release", name)
        if not os.path.isfile(built):
            return fail("cargo reported success but %s is missing" % built)
        install(built, folder, name)
        write_text(os.path.join(BIN, name), DISPATCHER.replace("@BINARY@", name), 0o755)
    triple = host_triple(rustc)
    target_file = os.path.join(folder, "TARGET.txt")
    if triple:
        write_text(target_file, triple + "\n")
    elif os.path.exists(target_file):
        os.remove(target_file)
    for _, name in BINARIES:
        why = bundle_check.misfit(os.path.join(folder, name))
        if why:
            return fail("the new %s still does not fit this machine: %s" % (name, why))
    if not chosen:
        shutil.rmtree(target_dir, ignore_errors=True)
    sys.stderr.write("build.sh: built %s into %s for %s in %.0fs\n" % (
        ", ".join(name for _, name in BINARIES), folder, triple or "this machine", time.time() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
