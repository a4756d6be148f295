# Exports rollout videos; kept from the original Python 2 tooling.
import os
import sys

import numpy as np


def main(path):
    frames = np.load(path)["frames"]
    print "exporting %d frames" % len(frames)
    for i, frame in enumerate(frames):
        np.save(os.path.join("videos", "%05d.npy" % i), frame)


if __name__ == "__main__":
    main(sys.argv[1])
