#!/usr/bin/env python3
"""Lengths of the C functions under a folder (default: libpxcore), so that
none grows past a limit (100 lines). A function is a top-level
brace block whose header ends in ')' (after attributes); its length is the
number of lines from the line of its name to the closing brace. Comments,
strings and character constants are skipped when counting braces.

  scripts/function_lengths.py [--max N] [--top K] [DIR ...]

Prints the K longest functions; exits 1 when one is longer than N (0: no
limit). Reads .c and .cu files only; runs in well under a second."""
import argparse
import os
import re
import sys


def strip(text):
    """The text with comments, strings and char constants blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    depth, start, res = 0, 0, []
    for i, c in enumerate(text):
        if c == "{":
            if depth == 0:
                head = text[max(0, text.rfind(";", 0, i), text.rfind("}", 0, i)) + 1:i]
                m = re.search(r"([A-Za-z_]\w*)\s*\([^;{}]*\)[^;{}()=]*$", head, re.S)
                if m and not re.search(r"\b(struct|union|enum)\b[^()]*$", head.split("(")[0] + " "):
                    name = m.group(1)
                    start = text.count("\n", 0, i - len(head) + m.start(1)) + 1
                    res.append([name, start, None])
                else:
                    res.append([None, 0, None])
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and res and res[-1][2] is None:
                res[-1][2] = text.count("\n", 0, i) + 1
    return [(n, s, e - s + 1) for n, s, e in res if n and e]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=0)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("dirs", nargs="*", default=["libpxcore"])
    a = ap.parse_args()
    rows = []
    for d in a.dirs:
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if f.endswith((".c", ".cu")):
                    p = os.path.join(root, f)
                    rows += [(ln, p, s, n) for n, s, ln in functions(p)]
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    for ln, p, s, n in rows[: a.top]:
        print(f"{ln:5d} {p}:{s} {n}")
    over = [r for r in rows if a.max and r[0] > a.max]
    print(f"{len(rows)} functions, {len(over)} over {a.max or 'no limit'} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
