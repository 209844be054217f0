#!/usr/bin/python3
"""Checks the ONNX export of a model trained on an image folder (run by
tests/test_pxctl_folder.c with Debian's /usr/bin/python3; none of PruneX's
code is used here):

  1. python3-onnx's checker accepts it; its input is C x S x S (the folder's
     stored size), the graph starts with the normalisation (Sub, Div), and
     metadata_props give the class names of the folder (the subdirectories
     of train/, sorted) in label order, the resize and crop size, the range
     and the mean/std;
  2. OpenCV's dnn, fed the raw pixels PruneX's loader decoded (bytes / 255,
     not normalised: X.raw), predicts what our engine predicts (LOGITS.f32,
     the compact model fed the normalised images) on every image but
     near-ties, with our logits (export_check.agree);
  3. OpenCV's dnn, fed the val images the way docs/user-guide.md says (read
     with OpenCV, shorter side scaled to S with INTER_AREA when shrinking,
     INTER_LINEAR when enlarging, centre S x S, / 255), agrees with our
     engine on at least 99% of them (another resampler than ours: 100% of
     the 1,000 measured) and reaches its accuracy within 1 point.

usage: folder_onnx_check.py MODEL.onnx FOLDER X.raw LOGITS.f32 N C S ACCURACY
Prints one line per check; exits 1 on the first failure.
"""
import os
import sys

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_check import agree, opencv_logits  # noqa: E402


def classes_of(folder):
    names = sorted(d for d in os.listdir(os.path.join(folder, "train"))
                   if not d.startswith(".") and os.path.isdir(os.path.join(folder, "train", d)))
    return names, ",".join(n.replace("\\", "\\\\").replace(",", "\\,") for n in names)


def check_onnx(path, folder, c, s):
    import onnx
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    props = {p.key: p.value for p in model.metadata_props}
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim][1:]
    ops = [n.op_type for n in model.graph.node[:2]]
    print("onnx checker: ok; input %s, first nodes %s, classes %s" %
          (dims, ops, props.get("prunex.classes")))
    if dims != [c, s, s] or ops != ["Sub", "Div"]:
        sys.exit("onnx: expected a raw %dx%dx%d input and the normalisation (Sub, Div) first" %
                 (c, s, s))
    names, joined = classes_of(folder)
    want = {"prunex.classes": joined, "prunex.resize": str(s), "prunex.crop": str(s),
            "prunex.input_size": "%dx%dx%d" % (c, s, s), "prunex.input_range": "0,1",
            "prunex.pad": "0", "prunex.dataset": "folder",
            "prunex.channel_order": "grey" if c == 1 else "R,G,B"}
    bad = {k: props.get(k) for k in want if props.get(k) != want[k]}
    if bad or "prunex.mean" not in props or "shorter side" not in props.get("prunex.input", ""):
        sys.exit("onnx: metadata_props do not describe the folder's input: %r (want %r)" %
                 (bad, want))
    return names


def val_images(folder, names, c, s):
    """The val split read as the docs say, in PruneX's label order."""
    xs, ys = [], []
    for label, name in enumerate(names):
        d = os.path.join(folder, "val", name)
        for f in sorted(os.listdir(d)):
            if f.startswith(".") or not f.lower().endswith((".png", ".jpg", ".jpeg")):
                continue
            img = cv2.imread(os.path.join(d, f), cv2.IMREAD_GRAYSCALE if c == 1 else cv2.IMREAD_COLOR)
            h, w = img.shape[:2]
            k = s / min(h, w)
            nw, nh = max(s, round(w * k)), max(s, round(h * k))
            img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_AREA if k < 1 else cv2.INTER_LINEAR)
            top, left = (nh - s) // 2, (nw - s) // 2
            img = img[top:top + s, left:left + s]
            img = img[None] if c == 1 else cv2.cvtColor(img, cv2.COLOR_BGR2RGB).transpose(2, 0, 1)
            xs.append(img.astype(np.float32) / np.float32(255.0))
            ys.append(label)
    return np.stack(xs), np.array(ys)


def main():
    onnx_path, folder, xs, ls = sys.argv[1:5]
    n, c, s = (int(v) for v in sys.argv[5:8])
    acc = float(sys.argv[8])
    names = check_onnx(onnx_path, folder, c, s)
    ours = np.fromfile(ls, dtype="<f4").reshape(n, -1)
    x = np.fromfile(xs, np.float32).reshape(n, c, s, s)
    docs_x, labels = val_images(folder, names, c, s)
    if len(labels) != n:
        sys.exit("val: %d images on disk, %d from PruneX's loader" % (len(labels), n))
    agree("opencv dnn, the loader's raw pixels in [0, 1]", opencv_logits(onnx_path, x), ours,
          labels, acc)
    theirs = opencv_logits(onnx_path, docs_x).argmax(1)
    same = float((theirs == ours.argmax(1)).mean())
    docs_acc = 100.0 * float((theirs == labels).mean())
    print("opencv dnn, val images resized and cropped by OpenCV as the docs say: agrees with our "
          "engine on %.1f%%, accuracy %.2f%% (ours %.2f%%)" % (100 * same, docs_acc, acc))
    if same < 0.99 or abs(docs_acc - acc) > 1.0:
        sys.exit("opencv dnn on the images fed as the docs say: too far from our engine")
    print("all checks passed")


if __name__ == "__main__":
    main()
