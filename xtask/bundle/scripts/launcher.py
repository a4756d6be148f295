#!/usr/bin/env python3
"""Runs the bundled `@BINARY@` with the same arguments; its exit code is this script's.

First checks that `bin/@BINARY@` fits this machine (see `bundle_check.py`): when it does not, one
line says why and names the build step (`bash build.sh` in the skill directory). Python 3.8+.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bundle_check  # noqa: E402

if __name__ == "__main__":
    sys.exit(bundle_check.run("@BINARY@"))
