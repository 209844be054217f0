#!/usr/bin/python3
"""Checks the TensorBoard event files pxctl writes (test_tensorboard.c).

usage: tensorboard_check.py PROTO METRICS.json DIR [DIR ...]

PROTO is proto/tensorboard.proto: its Python classes are generated with
protoc into a temporary directory and the records are parsed with
python3-protobuf, independently of the protobuf-c code that wrote them.
METRICS.json is what `pxctl metrics JOB --json --layers` printed for the
job. Each DIR must hold exactly one events.out.tfevents.* file, which must:
  - be a sequence of TFRecords whose length and data CRCs (masked CRC-32C,
    computed here with a table of its own, checked against the
    Castagnoli check value) are right, with nothing left over;
  - start with an Event whose file_version is "brain.Event:2";
  - then hold one Event per iteration of METRICS.json, in order, whose step
    is the iteration, wall_time the report's time_unix_ms / 1000, and whose
    Summary has exactly the scalars the tag rules below give for the
    report, each the report's value rounded to a float32.
The tag rules (docs/user-guide.md): see TAGS; the phase times go under
time/, any other number of the report under job/, each layer's figures
under admm/NAME/FIELD, its density under prune/density/NAME; a figure the
JSON says null is left out, as is mask_groups when not positive.
Prints one line per DIR; exit 0 when all hold, 1 (saying what) otherwise.
"""
import glob
import importlib
import os
import struct
import subprocess
import sys
import tempfile

TAGS = {
    "epoch": "train/epoch",
    "loss": "train/loss",
    "train_accuracy": "train/accuracy",
    "test_accuracy": "test/accuracy",
    "density": "prune/density",
    "mask_drift": "prune/mask_drift",
    "mask_groups": "prune/mask_groups",
    "frozen": "prune/frozen",
    "bytes_intra": "traffic/intra_bytes",
    "bytes_inter": "traffic/inter_bytes",
    "bytes_inter_dense": "traffic/inter_bytes_dense",
}
# not figures: the record's keys, membership_epoch (the report's fence) and
# roll_call (a survivor's repeat)
ITERATION_KEYS = {"job_id", "iteration", "rank", "time_unix_ms", "checkpoint_problem",
                  "phases", "layers", "membership_epoch", "roll_call"}
LAYER_KEYS = {"layer", "name", "numel"}


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC_TABLE = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class Bad(Exception):
    pass


def records(path):
    data = open(path, "rb").read()
    off = 0
    while off < len(data):
        if len(data) - off < 16:
            raise Bad("%s: %d bytes left at offset %d: not a whole record" % (path, len(data) - off, off))
        head = data[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[off + 8:off + 12])
        if hcrc != masked(crc32c(head)):
            raise Bad("%s: record at %d: length CRC %08x, expected %08x" % (path, off, hcrc, masked(crc32c(head))))
        if off + 16 + n > len(data):
            raise Bad("%s: record at %d: %d bytes of data do not fit" % (path, off, n))
        body = data[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack("<I", data[off + 12 + n:off + 16 + n])
        if dcrc != masked(crc32c(body)):
            raise Bad("%s: record at %d: data CRC %08x, expected %08x" % (path, off, dcrc, masked(crc32c(body))))
        yield body
        off += 16 + n


def f32(v):
    return struct.unpack("<f", struct.pack("<f", float(v)))[0]


def expected_scalars(it):
    exp = {}
    for k, v in it.items():
        if k in ITERATION_KEYS or v is None or isinstance(v, str):
            continue
        if k == "mask_groups" and v <= 0:
            continue
        exp[TAGS.get(k, "job/" + k)] = f32(v)
    for k, v in (it.get("phases") or {}).items():
        if v is not None:
            exp["time/" + k] = f32(v)
    for L in it.get("layers") or []:
        name = L["name"] or "layer%d" % L["layer"]
        for k, v in L.items():
            if k in LAYER_KEYS or v is None or isinstance(v, str):
                continue
            tag = "prune/density/" + name if k == "density" else "admm/%s/%s" % (name, k)
            exp[tag] = f32(v)
    return exp


def check_dir(pb, d, iterations):
    files = glob.glob(os.path.join(d, "events.out.tfevents.*"))
    if len(files) != 1:
        raise Bad("%s: %d event files, expected 1" % (d, len(files)))
    evs = []
    for body in records(files[0]):
        ev = pb.Event()
        ev.ParseFromString(body)
        evs.append(ev)
    if not evs or evs[0].WhichOneof("what") != "file_version" or evs[0].file_version != "brain.Event:2":
        raise Bad("%s: the first event is not file_version brain.Event:2" % files[0])
    evs = evs[1:]
    if [e.step for e in evs] != [it["iteration"] for it in iterations]:
        raise Bad("%s: steps %s, the job's iterations %s" % (files[0], [e.step for e in evs],
                                                            [it["iteration"] for it in iterations]))
    scalars = acc = admm = 0
    for ev, it in zip(evs, iterations):
        if ev.WhichOneof("what") != "summary":
            raise Bad("%s: step %d carries no summary" % (files[0], ev.step))
        if abs(ev.wall_time - it["time_unix_ms"] / 1000.0) > 1e-6:
            raise Bad("%s: step %d: wall_time %.6f, report time %d ms" % (files[0], ev.step, ev.wall_time, it["time_unix_ms"]))
        got = {}
        for v in ev.summary.value:
            if v.WhichOneof("value") != "simple_value":
                raise Bad("%s: step %d: %s is not a simple_value" % (files[0], ev.step, v.tag))
            if v.tag in got:
                raise Bad("%s: step %d: tag %s twice" % (files[0], ev.step, v.tag))
            got[v.tag] = v.simple_value
        exp = expected_scalars(it)
        if set(got) != set(exp):
            raise Bad("%s: step %d: tags missing %s, unexpected %s" % (
                files[0], ev.step, sorted(set(exp) - set(got)), sorted(set(got) - set(exp))))
        for tag, want in exp.items():
            if got[tag] != want:
                raise Bad("%s: step %d: %s = %r, the report says %r" % (files[0], ev.step, tag, got[tag], want))
        scalars += len(got)
        acc += "test/accuracy" in got
        admm += sum(t.startswith("admm/") for t in got)
    return len(evs), scalars, acc, admm


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    if crc32c(b"123456789") != 0xE3069283:
        raise Bad("crc32c check value")
    import json
    doc = json.load(open(argv[2]))
    iterations = doc["iterations"]
    with tempfile.TemporaryDirectory() as tmp:
        proto = os.path.abspath(argv[1])
        subprocess.run(["protoc", "-I", os.path.dirname(proto), "--python_out=" + tmp, proto],
                       check=True)
        sys.path.insert(0, tmp)
        pb = importlib.import_module(os.path.basename(proto)[:-len(".proto")] + "_pb2")
        for d in argv[3:]:
            n, s, acc, admm = check_dir(pb, d, iterations)
            print("%s: %d events, %d scalars match the job's %d iterations; test/accuracy %d, "
                  "admm %d" % (d, n, s, len(iterations), acc, admm))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Bad as e:
        print("FAIL: %s" % e)
        sys.exit(1)
