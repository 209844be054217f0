#!/usr/bin/python3
"""A 3-channel export fed in batches (run by tests/test_export_rgb.c with
Debian's /usr/bin/python3; none of PruneX's code is used here): OpenCV 4.6's
dnn runs the ONNX file on batches of 1, 5 and all N raw images (bytes / 255,
R,G,B planes) and gives our engine's logits on every image of every batch.
Its broadcasting Sub of a [1, 3, 1, 1] mean failed on batches over one
(shape_utils.hpp:170 "start <= (int)shape.size()"); the export writes the
per-channel constants as [3, 1, 1].

ONNX Runtime's logits of the batch (ORT.f32, written by tests/onnx_ort.js;
"-": not installed) must be our engine's too.

usage: export_rgb_check.py MODEL.onnx X.u8 LOGITS.f32 N C H W ORT.f32|-
Prints one line per check; exits 1 on the first failure.
"""
import sys

import cv2
import numpy as np
import onnx


def main():
    path, xpath, lpath = sys.argv[1:4]
    n, c, h, w = (int(a) for a in sys.argv[4:8])
    onnx.checker.check_model(onnx.load(path), full_check=True)
    x = np.fromfile(xpath, dtype=np.uint8).reshape(n, c, h, w).astype(np.float32) / 255.0
    ours = np.fromfile(lpath, dtype=np.float32).reshape(n, -1)
    net = cv2.dnn.readNetFromONNX(path)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    tol = 1e-4 * (1.0 + float(np.abs(ours).max()))
    for b in (1, 5, n):
        got = []
        for i in range(0, n, b):
            net.setInput(x[i:i + b])
            got.append(net.forward().copy())
        got = np.concatenate(got)
        d = float(np.abs(got - ours).max())
        print("opencv dnn, batches of %d: max |logit diff| %.3g (tolerance %.3g)" % (b, d, tol))
        if got.shape != ours.shape or d > tol:
            sys.exit("opencv dnn on batches of %d disagrees with our engine" % b)
    if sys.argv[8] != "-":
        got = np.fromfile(sys.argv[8], dtype=np.float32).reshape(n, -1)
        d = float(np.abs(got - ours).max())
        print("onnx runtime, a batch of %d: max |logit diff| %.3g (tolerance %.3g)" % (n, d, tol))
        if d > tol:
            sys.exit("onnx runtime disagrees with our engine")
    print("all checks passed")


if __name__ == "__main__":
    main()
