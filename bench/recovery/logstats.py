"""Figures of bench/recovery/run.sh from rank 0's log: the median time
between consecutive iterations (the last, which evaluates, left out), and
for checkpoints the median time a checkpoint held training (the first, which
allocates the snapshot, left out), the median background write and the size
per rank. Prints: it_ms held_ms write_ms MB (nan where absent).
    logstats.py RANK0_LOG"""
import re
import statistics
import sys
from datetime import datetime


def ts(line):
    return datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def med(v):
    return f"{statistics.median(v):.1f}" if v else "nan"


def main():
    its, held, write, mb = [], [], [], []
    for line in open(sys.argv[1], errors="replace"):
        if re.search(r"rank 0: iteration \d+ \(", line):
            its.append(ts(line))
        m = re.search(r"checkpoint of iteration \d+: ([0-9.]+) MB, training held ([0-9.]+) ms", line)
        if m:
            mb.append(float(m.group(1)))
            held.append(float(m.group(2)))
        m = re.search(r"written in the background in ([0-9.]+) ms", line)
        if m:
            write.append(float(m.group(1)))
    deltas = [1e3 * (b - a) for a, b in zip(its[:-2], its[1:-1])]
    print(med(deltas), med(held[1:]), med(write), f"{mb[0]:.1f}" if mb else "nan")


if __name__ == "__main__":
    main()
