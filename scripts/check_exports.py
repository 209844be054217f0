#!/usr/bin/env python3
"""Checks libpxcore's boundary: the shared library (the SDK) exports its
public API and nothing else, and the public API stays small.

Reads every public header (libpxcore/include/<layer>/prunex/*.h: every .h
file under INCLUDE_DIR, at any depth) for the functions and
variables it declares at file scope, and `nm -D --defined-only` of the built
libpxcore.so, then fails (exit 1, one line per problem) when
  - a declaration in a public header lacks PX_API (it would be hidden),
  - a declared function or variable is not exported,
  - an exported px_ symbol is declared in no public header (an internal that
    escaped, or a public header that forgot it),
  - any px__ (internal) or onnx__ (the private ONNX protobuf code) symbol is
    exported,
  - two headers of one name (they install to one include/prunex/),
  - with INTERNAL_DIR (libpxcore/include-internal, not installed): a
    declaration there carries PX_API (internal declarations are not
    exported), or a public header includes an internal one (the installed
    headers would not compile),
  - with --max N: the public headers declare more than N functions and
    variables.
The generated protobuf-c API of prunex.proto (prunex__*) is public on purpose.
Prints the count of public declarations per header.

Usage: check_exports.py [--max N] LIBRARY_SO INCLUDE_DIR [INTERNAL_DIR]
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
    return declarations_lines(open(header).read().split('\n'))


def declarations_lines(lines):
    """declarations() of a header's lines."""
    out = []
    depth = 0
    lines = strip_comments('\n'.join(lines)).split('\n')
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


def header_paths(d):
    """{name: [path, ...]} of the .h files under d, at any depth."""
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            if n.endswith('.h'):
                out.setdefault(n, []).append(os.path.join(root, n))
    return out


def headers(d):
    """(name, path) of each header under d, by name; a name twice is
    check_unique's problem (the first path is used)."""
    return [(n, sorted(p)[0]) for n, p in sorted(header_paths(d).items())]


def check_unique(dirs, problems):
    seen = {}
    for d in dirs:
        for n, paths in header_paths(d).items():
            seen.setdefault(n, []).extend(paths)
    for n, paths in sorted(seen.items()):
        if len(paths) > 1:
            problems.append('prunex/%s is %d headers: %s' % (n, len(paths), ', '.join(sorted(paths))))


INCLUDE = re.compile(r'^\s*#\s*include\s+"prunex/([\w]+\.h)"', re.M)


def check_internal(incdir, intdir, problems):
    """Internal headers mark nothing PX_API; public ones include none of them."""
    internal = dict(headers(intdir))
    public = dict(headers(incdir))
    for name, path in sorted(internal.items()):
        for sym, has_api, line in declarations(path):
            if has_api:
                problems.append('%s:%d: %s is internal but marked PX_API' % (path, line, sym))
        if name in public:
            problems.append('%s: also a public header (%s)' % (path, public[name]))
    for name, path in sorted(public.items()):
        for inc in INCLUDE.findall(strip_comments(open(path).read())):
            if inc in internal:
                problems.append('%s includes the internal header prunex/%s' % (path, inc))


def main():
    args = sys.argv[1:]
    limit = None
    if len(args) >= 2 and args[0] == '--max':
        limit = int(args[1])
        args = args[2:]
    if len(args) not in (2, 3):
        sys.exit(__doc__)
    lib, incdir = args[0], args[1]
    nm = subprocess.run(['nm', '-D', '--defined-only', lib], capture_output=True, text=True)
    if nm.returncode != 0:
        sys.exit('nm failed on %s: %s' % (lib, nm.stderr.strip()))
    exported = {f[2] for f in (l.split() for l in nm.stdout.splitlines()) if len(f) == 3}
    problems = []
    declared = {}
    per_header = []
    for name, path in headers(incdir):
        decls = declarations(path)
        per_header.append('%s %d' % (name, len(decls)))
        for sym, has_api, line in decls:
            declared[sym] = (path, line)
            if not has_api:
                problems.append('%s:%d: %s is declared without PX_API (hidden from users)'
                                % (path, line, sym))
            elif sym not in exported:
                problems.append('%s:%d: %s is declared but %s does not export it'
                                % (path, line, sym, lib))
    for sym in sorted(exported):
        if sym.startswith('px__') or sym.startswith('onnx__'):
            problems.append('%s exports the internal symbol %s' % (lib, sym))
        elif sym.startswith('px_') and sym not in declared:
            problems.append('%s exports %s, which no public header declares' % (lib, sym))
    check_unique(args[1:], problems)
    if len(args) == 3:
        check_internal(incdir, args[2], problems)
    if limit is not None and len(declared) > limit:
        problems.append('the public headers declare %d functions and variables, more than %d: '
                        'what only the library, its programs and its tests use belongs in an '
                        'internal header' % (len(declared), limit))
    for p in problems:
        print(p)
    print('public declarations per header: ' + ', '.join(per_header))
    npx = sum(1 for s in exported if s.startswith('px_'))
    print('%s: %d px_ symbols exported, %d declared in %s%s, %d problem(s)'
          % (lib, npx, len(declared), incdir, ' (at most %d)' % limit if limit else '',
             len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
