"""Start the npu-verify harness: ``python run_harness.py REQUEST.json``.

npu-verify writes this directory to a private temporary folder and runs this file with the interpreter it found.
The request names the mode (runtime, pipeline or data), the project and where to write the results (one JSON
object per line, so that the checks finished before a crash or a hang survive it).
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# The user's program must not see this folder first on sys.path; the harness package goes last.
if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
    del sys.path[0]
sys.path.append(_HERE)

from npu_verify_harness.main import main  # noqa: E402

if __name__ == "__main__":
    main(sys.argv[1:])
