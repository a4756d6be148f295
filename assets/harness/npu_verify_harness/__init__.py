"""The Python side of npu-verify: runtime checks, and the project's own training entry run under observation.

It must stay importable on any Python >= 3.8 without torch (so that a too-old interpreter or a missing torch is
reported as a failed check, not a crash), and it must not change the user's program beyond what it reports:
the hooks it installs observe (optimizer steps, ``backward`` calls, dtypes, warnings) and stop the program after
the requested number of steps or batches.
"""
