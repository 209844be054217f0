#!/usr/bin/env python3
"""Checks libpxcore's boundary: the shared library exports its public API and
nothing else.

Reads every public header (libpxcore/include/prunex/*.h) for the functions and
variables it declares at file scope, and `nm -D --defined-only` of the built
libpxcore.so, then fails (exit 1, one line per problem) when
  - a declaration in a public header lacks PX_API (it would be hidden),
  - a declared function or variable is not exported,
  - an exported px_ symbol is declared in no public header (an internal that
    escaped, or a public header that forgot it),
  - any px__ (internal) or onnx__ (the private ONNX protobuf code) symbol is
    exported.
The generated protobuf-c API of prunex.proto (prunex__*) is public on purpose.
With --subset (libpxclient.so, the client part of the API) a declared symbol
that the library does not export is not a problem; the other checks hold.

Usage: check_exports.py [--subset] LIBRARY_SO INCLUDE_DIR
"""
import os
import re
import subprocess
import sys

# A file-scope declaration starts at column 0 with its type (optionally PX_API
# or extern) and names a px_ function or variable.
# A function returns any type (`struct sqlite3 *px_store_sqlite(...)` too); a
# variable is declared extern.
DECL = re.compile(r'^(PX_API\s+)?(?!typedef\b|static\b|extern\b|#)'
                  r'[A-Za-z_][\w \t\*]*?\b(px_[a-z0-9_]+)\s*\(')
VAR = re.compile(r'^(PX_API\s+)?extern\s+(?!"C")[\w \t\*]*?\b(px_[a-z0-9_]+)\s*(\[|;)')


def strip_comments(text):
    return re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)


def declarations(header):
    """(name, has_px_api, line) for each file-scope declaration of header."""
    out = []
    depth = 0
    lines = strip_comments(open(header).read()).split('\n')
    for no, line in enumerate(lines, 1):
        s = line.strip()
        if s == 'extern "C" {' or (s == '}' and no > 1 and
                                   lines[no - 2].strip().startswith('#ifdef __cplusplus')):
            continue
        m = (DECL.match(line) or VAR.match(line)) if depth == 0 else None
        if m:
            out.append((m.group(2), bool(m.group(1)), no))
        code = re.sub(r'"[^"]*"', '', line)
        depth = max(0, depth + code.count('{') - code.count('}'))
    return out


def main():
    args = sys.argv[1:]
    subset = bool(args) and args[0] == '--subset'
    if subset:
        args = args[1:]
    if len(args) != 2:
        sys.exit(__doc__)
    lib, incdir = args
    nm = subprocess.run(['nm', '-D', '--defined-only', lib], capture_output=True, text=True)
    if nm.returncode != 0:
        sys.exit('nm failed on %s: %s' % (lib, nm.stderr.strip()))
    exported = {f[2] for f in (l.split() for l in nm.stdout.splitlines()) if len(f) == 3}
    problems = []
    declared = {}
    for name in sorted(os.listdir(incdir)):
        if not name.endswith('.h'):
            continue
        path = os.path.join(incdir, name)
        for sym, has_api, line in declarations(path):
            declared[sym] = (path, line)
            if not has_api:
                problems.append('%s:%d: %s is declared without PX_API (hidden from users)'
                                % (path, line, sym))
            elif sym not in exported and not subset:
                problems.append('%s:%d: %s is declared but %s does not export it'
                                % (path, line, sym, lib))
    for sym in sorted(exported):
        if sym.startswith('px__') or sym.startswith('onnx__'):
            problems.append('%s exports the internal symbol %s' % (lib, sym))
        elif sym.startswith('px_') and sym not in declared:
            problems.append('%s exports %s, which no public header declares' % (lib, sym))
    for p in problems:
        print(p)
    npx = sum(1 for s in exported if s.startswith('px_'))
    print('%s: %d px_ symbols exported, %d declared in %s, %d problem(s)'
          % (lib, npx, len(declared), incdir, len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
