"""Does `bin/` fit this machine? The launchers ask before they run a bundled binary.

A binary of the wrong architecture, or one that needs a C library this machine lacks, fails with
an exec error ("Exec format error", "No such file or directory" for a present file, "version
`GLIBC_2.34' not found") that names neither the cause nor the fix. This module reads the binary's
ELF header instead: its machine (`e_machine`) against `platform.machine()`, its dynamic loader
(`PT_INTERP`: glibc's `ld-linux-*`, musl's `ld-musl-*`) against the files of this machine, and
the glibc versions it needs (`.gnu.version_r`) against this machine's glibc. A misfit is one
line that names the build step (`bash <bundle>/build.sh`), which builds `bin/` from the
bundle's own sources for this machine, offline.

The binaries of each architecture are in `bin/<machine>/` (`bin/x86_64/`, `bin/aarch64/`, named as
`platform.machine()` names the architecture, `amd64` and `arm64` read as `x86_64` and `aarch64`),
each folder with a `TARGET.txt` naming the target triple they are built for.

Python 3.8+, standard library only. `NPU_PATCHER_NO_BIN_CHECK=1` skips the check.
"""

import os
import platform
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLE = os.path.dirname(HERE)
BIN = os.path.join(BUNDLE, "bin")
BUILD_STEP = "bash %s" % os.path.join(BUNDLE, "build.sh")

# ELF e_machine values and the names platform.machine() gives the same architecture.
MACHINES = {
    3: "x86",
    8: "mips",
    20: "powerpc",
    21: "ppc64",
    22: "s390x",
    40: "arm",
    62: "x86_64",
    183: "aarch64",
    243: "riscv64",
    258: "loongarch64",
}
ALIASES = {
    "amd64": "x86_64",
    "x64": "x86_64",
    "arm64": "aarch64",
    "armv8l": "aarch64",
    "i386": "x86",
    "i486": "x86",
    "i586": "x86",
    "i686": "x86",
    "ppc64le": "ppc64",
}

PT_INTERP = 3
SHT_GNU_VERNEED = 0x6FFFFFFE


class NotElf(Exception):
    """The file is not an ELF binary (or is cut short)."""


class Elf:
    """What the launcher needs from an ELF file: machine, loader, needed glibc versions."""

    def __init__(self, data):
        if len(data) < 52 or data[:4] != b"\x7fELF":
            raise NotElf("not an ELF file")
        self.bits = {1: 32, 2: 64}.get(data[4])
        order = {1: "<", 2: ">"}.get(data[5])
        if self.bits is None or order is None:
            raise NotElf("an ELF header of an unknown class or byte order")
        self.data = data
        self.order = order
        self.machine_id = self._unpack("H", 18)
        self.machine = MACHINES.get(self.machine_id, "ELF machine %d" % self.machine_id)
        if self.bits == 64:
            self.phoff, self.shoff = self._unpack("QQ", 32)
            self.phentsize, self.phnum, self.shentsize, self.shnum = self._unpack("HHHH", 54)
        else:
            self.phoff, self.shoff = self._unpack("II", 28)
            self.phentsize, self.phnum, self.shentsize, self.shnum = self._unpack("HHHH", 42)

    def _unpack(self, fmt, offset):
        fmt = self.order + fmt
        end = offset + struct.calcsize(fmt)
        if end > len(self.data):
            raise NotElf("an ELF file cut short")
        values = struct.unpack(fmt, self.data[offset:end])
        return values[0] if len(values) == 1 else values

    def interpreter(self):
        """The dynamic loader the binary names (PT_INTERP), or None for a static binary."""
        for i in range(self.phnum):
            at = self.phoff + i * self.phentsize
            if self._unpack("I", at) != PT_INTERP:
                continue
            if self.bits == 64:
                offset, size = self._unpack("Q", at + 8), self._unpack("Q", at + 32)
            else:
                offset, size = self._unpack("I", at + 4), self._unpack("I", at + 16)
            return self.data[offset:offset + size].split(b"\0")[0].decode("ascii", "replace")
        return None

    def _section(self, index):
        at = self.shoff + index * self.shentsize
        if self.bits == 64:
            kind = self._unpack("I", at + 4)
            offset, size = self._unpack("QQ", at + 24)
            link = self._unpack("I", at + 40)
        else:
            kind = self._unpack("I", at + 4)
            offset, size, link = self._unpack("III", at + 16)
        return kind, offset, size, link

    def glibc_needed(self):
        """The newest `GLIBC_2.N` symbol version the binary needs, as a tuple, or None."""
        if not self.shoff or not self.shnum:
            return None
        newest = None
        for index in range(self.shnum):
            kind, offset, _size, link = self._section(index)
            if kind != SHT_GNU_VERNEED:
                continue
            _k, strings, _s, _l = self._section(link)
            need = offset
            for _ in range(1000):
                _version, count, _file, aux, following = self._unpack("HHIII", need)
                entry = need + aux
                for _ in range(count):
                    _hash, _flags, _other, name, step = self._unpack("IHHII", entry)
                    end = self.data.find(b"\0", strings + name)
                    text = self.data[strings + name:end].decode("ascii", "replace")
                    version = _glibc_version(text)
                    if version and (newest is None or version > newest):
                        newest = version
                    if not step:
                        break
                    entry += step
                if not following:
                    break
                need += following
        return newest


def _glibc_version(text):
    if not text.startswith("GLIBC_"):
        return None
    try:
        return tuple(int(part) for part in text[len("GLIBC_"):].split("."))
    except ValueError:
        return None


def _libc_of(interpreter):
    name = os.path.basename(interpreter)
    if "musl" in name:
        return "musl"
    if name.startswith("ld-linux") or name.startswith("ld64.so") or name.startswith("ld.so"):
        return "glibc"
    return None


def machine_libc():
    """This machine's C library: ('glibc', (2, 35)), ('musl', None) or (None, None)."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        text = ""
    if text.startswith("glibc "):
        version = _glibc_version("GLIBC_" + text.split()[1])
        return "glibc", version
    for folder in ("/lib", "/usr/lib"):
        try:
            if any(n.startswith("ld-musl-") for n in os.listdir(folder)):
                return "musl", None
        except OSError:
            continue
    return None, None


def machine_arch():
    name = platform.machine().lower()
    return ALIASES.get(name, name)


def _dotted(version):
    return ".".join(str(part) for part in version)


def built_for(binary):
    """The target triple `TARGET.txt` beside `binary` names, or None."""
    try:
        with open(os.path.join(os.path.dirname(binary), "TARGET.txt")) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def binary_path(binary_name):
    """`bin/<machine>/<binary_name>`: the binary for this machine's architecture."""
    return os.path.join(BIN, machine_arch(), binary_name)


def shipped_machines(binary_name):
    """The architectures (`bin/<machine>/` folders) that hold `binary_name`, sorted."""
    try:
        names = sorted(os.listdir(BIN))
    except OSError:
        return []
    return [n for n in names if os.path.isfile(os.path.join(BIN, n, binary_name))]


def misfit(binary):
    """Why `binary` cannot run on this machine (one line, without the fix), or None when it fits."""
    name = os.path.relpath(binary, BUNDLE)
    if not os.path.isfile(binary):
        base = os.path.basename(binary)
        others = shipped_machines(base)
        return "this bundle has no %s for this machine (%s: %s is missing; it has %s)" % (
            base, platform.machine() or "unknown", name, ", ".join("bin/%s/" % o for o in others) or "none")
    if not platform.system() == "Linux":
        return "%s is a Linux binary and this machine runs %s" % (name, platform.system() or "another system")
    try:
        with open(binary, "rb") as handle:
            data = handle.read()
        elf = Elf(data)
    except OSError as error:
        return "%s cannot be read (%s)" % (name, error.strerror or error)
    except NotElf as error:
        return "%s is %s" % (name, error)
    arch = machine_arch()
    target = built_for(binary)
    label = " (%s)" % target if target else ""
    if elf.machine != arch:
        return "%s is built for %s%s and this machine is %s" % (name, elf.machine, label, arch)
    interpreter = elf.interpreter()
    if interpreter is None:
        return None
    libc, version = machine_libc()
    wants = _libc_of(interpreter)
    if not os.path.exists(interpreter):
        return "%s is built for %s with %s (it needs the loader %s) and this machine has %s" % (
            name, elf.machine, wants or "another C library", interpreter, libc or "no such loader")
    if wants == "glibc" and libc == "glibc" and version:
        needed = elf.glibc_needed()
        if needed and needed > version:
            return "%s needs glibc %s and this machine has glibc %s" % (name, _dotted(needed), _dotted(version))
    return None


def run(binary_name):
    """Run `bin/<machine>/<binary_name>` with this script's arguments; its exit code is the return value."""
    binary = binary_path(binary_name)
    if os.environ.get("NPU_PATCHER_NO_BIN_CHECK") != "1" or not os.path.isfile(binary):
        why = misfit(binary)
        if why:
            sys.stderr.write("%s: error: %s; build bin/%s/ for this machine: %s\n" % (
                binary_name, why, machine_arch(), BUILD_STEP))
            return 2
    argv = [binary] + sys.argv[1:]
    # The tool's hints then show the command the user actually typed.
    os.environ.setdefault("NPU_PATCHER_INVOKED_AS", "python " + sys.argv[0])
    if os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(binary, argv)
    return subprocess.call(argv)
