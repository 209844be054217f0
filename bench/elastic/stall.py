"""The stall of a disturbed run of bench/elastic/run.sh: how long the run
stood still at the disturbance, beyond one normal round. With T(i) the time
iteration i was first reported before the disturbance and T'(i + 1) the time
the first iteration after it was reported (after any restart and the rounds
trained again since the checkpoint), the stall is T'(i + 1) - T(i) - d, d
the median time between consecutive reports of the same run (the last,
which evaluates, left out). Unlike the difference of two runs' walls it does
not move with the machine's load outside that window.

    stall.py px METRICS_JSON KILL_FILE   (pxctl --json metrics; "i T(i)_ms")
    stall.py torch LOG KILL_STEP         (the STEP n seconds lines of rank 0;
                                          a step, not a round: d is a step)
Prints the stall in seconds and d, or "- -" when the run has not the lines."""
import json
import re
import statistics
import sys


def px(metrics, kill_file):
    i, t_i = (float(x) for x in open(kill_file).read().split()[:2])
    doc = json.load(open(metrics))
    rows = doc if isinstance(doc, list) else doc.get("iterations", [])
    t = {int(r["iteration"]): float(r["time_unix_ms"]) / 1e3 for r in rows}
    return t, int(i), t_i / 1e3


def torch(log, kill_step):
    t = {}
    first = {}
    for line in open(log, errors="replace"):
        m = re.search(r"STEP (\d+) ([0-9.]+)", line)
        if m:
            n, s = int(m.group(1)), float(m.group(2))
            first.setdefault(n, s)
            t[n] = s  # the last: after a restart, the step trained again
    k = int(kill_step)
    return t, k, first.get(k)


def main():
    t, i, t_i = (px if sys.argv[1] == "px" else torch)(sys.argv[2], sys.argv[3])
    keys = sorted(t)
    d = [t[b] - t[a] for a, b in zip(keys[:-2], keys[1:-1]) if b == a + 1 and a != i]
    if t_i is None or i + 1 not in t or not d:
        print("- -")
        return
    dt = statistics.median(d)
    print("%.1f %.2f" % (t[i + 1] - t_i - dt, dt))


if __name__ == "__main__":
    main()
