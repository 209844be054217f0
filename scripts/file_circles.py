#!/usr/bin/env python3
"""Finds circles of calls between the .c files of a directory, and SQL outside
a data layer.

A function defined (not static) in file A and used in file B (called, or
named as a callback) gives the edge B -> A. A circle is a set of two or more
files that reach each other along these edges (a strongly connected
component); each is reported with one loop through it. Headers are not
files of their own here: what they declare is defined in some .c file.

  file_circles.py DIR...                 exit 1 when some DIR has a circle
  file_circles.py --self-test            checks both checks on made-up trees
  file_circles.py --sql DIR --db SUBDIR [--allow FILE]...
      exit 1 when a .c file of DIR outside DIR/SUBDIR holds an SQL string
      literal (one that starts with SELECT, INSERT, UPDATE, DELETE, ...),
      unless it is allowed; lists the files and lines. An allowed file that
      holds no SQL any more is reported too (the list is to shrink).

Standard library only; linear in the size of the sources."""
import argparse
import os
import re
import sys

TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*|'
                   r'[A-Za-z_]\w*|\S', re.S)
SQL = re.compile(r'\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|BEGIN|WITH|REPLACE|DROP|ALTER|'
                 r'PRAGMA|COMMIT|ROLLBACK)\b')
KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'do', 'else', 'case'}


def c_files(root):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.join(d, n) for n in sorted(names) if n.endswith('.c')]
    return sorted(out)


def tokens(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    # preprocessor lines carry no calls of interest (macros are expanded by
    # name where they are used); drop them, keeping line numbers
    text = re.sub(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', lambda m: '\n' * m.group(0).count('\n'),
                  text, flags=re.M)
    line = 1
    pos = 0
    for m in TOKEN.finditer(text):
        line += text.count('\n', pos, m.start())
        pos = m.start()
        yield m.group(0), line


def scan(path):
    """(external definitions, static definitions, identifiers used outside
    their own definition)."""
    defs, statics, used = set(), set(), set()
    depth = 0
    prev = []          # tokens at depth 0 since the last ';' or '}'
    for tok, _ in tokens(path):
        if tok.startswith(('/*', '//')):
            continue
        if tok == '{':
            if depth == 0:
                # a function body: NAME ( ... ) {
                name = None
                lvl = 0
                for i in range(len(prev) - 1, -1, -1):
                    t = prev[i]
                    if t == ')':
                        lvl += 1
                    elif t == '(':
                        lvl -= 1
                        if lvl == 0 and i > 0 and re.match(r'[A-Za-z_]\w*$', prev[i - 1]):
                            name = prev[i - 1]
                            break
                if name and '=' not in prev and prev[-1:] == [')']:
                    (statics if 'static' in prev else defs).add(name)
            depth += 1
            prev = []
            continue
        if tok == '}':
            depth -= 1
            prev = []
            continue
        if depth == 0:
            if tok == ';':
                for t in prev:
                    if re.match(r'[A-Za-z_]\w*$', t):
                        used.add(t)  # initialisers of tables name callbacks
                prev = []
            else:
                prev.append(tok)
            continue
        if re.match(r'[A-Za-z_]\w*$', tok) and tok not in KEYWORDS:
            used.add(tok)
    return defs, statics, used


def graph(root):
    files = c_files(root)
    info = {f: scan(f) for f in files}
    owner = {}
    for f, (defs, _, _) in info.items():
        for d in defs:
            owner.setdefault(d, f)
    edges = {f: {} for f in files}
    for f, (defs, statics, used) in info.items():
        for name in used - defs - statics:
            g = owner.get(name)
            if g and g != f:
                edges[f].setdefault(g, name)
    return edges


def circles(edges):
    """Strongly connected components of more than one file (iterative
    Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def loop_in(comp, edges):
    """One loop through the component's first file (breadth-first)."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    for v in queue:
        for w in sorted(edges[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def check_circles(dirs):
    bad = 0
    for root in dirs:
        edges = graph(root)
        for comp in circles(edges):
            bad += 1
            loop = loop_in(comp, edges)
            steps = []
            for a, b in zip(loop, loop[1:]):
                steps.append('%s -> %s (%s)' % (os.path.relpath(a, root),
                                                os.path.relpath(b, root), edges[a][b]))
            print('%s: a circle of %d files: %s' % (root, len(comp),
                                                   ', '.join(os.path.relpath(c, root)
                                                             for c in comp)))
            for s in steps:
                print('    ' + s)
        if not bad:
            print('%s: no circle among %d files' % (root, len(edges)))
    return 1 if bad else 0


def check_sql(root, db, allow):
    bad = 0
    dbdir = os.path.join(root, db)
    for f in c_files(root):
        if os.path.commonpath([f, dbdir]) == dbdir:
            continue
        rel = os.path.relpath(f, root)
        hits = [line for tok, line in tokens(f)
                if tok.startswith('"') and SQL.match(tok[1:])]
        if hits and rel not in allow:
            bad += 1
            print('%s: SQL outside %s/ at line%s %s' % (os.path.join(root, rel), db,
                  's' if len(hits) > 1 else '', ', '.join(map(str, hits))))
        elif not hits and rel in allow:
            print('%s: allowed to hold SQL but holds none: take it off the list'
                  % os.path.join(root, rel))
            bad += 1
    if not bad:
        print('%s: no SQL outside %s/ (allowed for now: %s)' % (root, db,
              ', '.join(sorted(allow)) or 'none'))
    return 1 if bad else 0


def self_test():
    """Both checks must find what is planted and pass what is clean."""
    import contextlib
    import io
    import tempfile
    tree = {
        'a.c': 'static int helper(void) { return 1; }\nint a_run(void) { return b_run() + helper(); }\n',
        'b.c': '/* b_run is c_run\'s caller: "SELECT in a comment" */\n'
               'int b_run(void) { return c_run(); }\n',
        'c.c': 'typedef int (*fn)(void);\nstatic fn table[] = {a_run};\n'
               'int c_run(void) { return table[0] != 0; }\n',
        'd.c': 'int d_run(void) { return a_run(); }\n',
        'db/q.c': 'const char *q(void) { return "SELECT 1"; }\n',
        'e.c': 'const char *e(void) { return " UPDATE nodes SET x = 1"; }\n',
        'f.c': 'const char *f(void) { return "selected: none"; }\n',
    }
    failures = []
    with tempfile.TemporaryDirectory() as root:
        for name, text in tree.items():
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), 'w') as f:
                f.write(text)
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet):
            edges = graph(root)
            comps = circles(edges)
            names = [[os.path.relpath(f, root) for f in comp] for comp in comps]
            if names != [['a.c', 'b.c', 'c.c']]:
                failures.append('circle of a.c, b.c, c.c (c.c names a_run in a table), got %r'
                                % names)
            if check_circles([root]) != 1:
                failures.append('check_circles passed a tree with a circle')
            os.remove(os.path.join(root, 'c.c'))
            if check_circles([root]) != 0:
                failures.append('check_circles failed a tree without a circle')
            if check_sql(root, 'db', set()) != 1:
                failures.append('check_sql passed e.c (an UPDATE outside db/)')
            if check_sql(root, 'db', {'e.c'}) != 0:
                failures.append('check_sql failed with e.c allowed: ' + quiet.getvalue())
            if check_sql(root, 'db', {'e.c', 'f.c'}) != 1:
                failures.append('check_sql kept f.c allowed though it holds no SQL')
    for f in failures:
        print('self-test: ' + f)
    print('self-test: %s' % ('FAILED' if failures else 'ok'))
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ['--self-test']:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('dirs', nargs='+')
    ap.add_argument('--sql', action='store_true', help='check for SQL outside --db')
    ap.add_argument('--db', default='db')
    ap.add_argument('--allow', action='append', default=[])
    a = ap.parse_args()
    for d in a.dirs:
        if not os.path.isdir(d):
            print('%s: not a directory' % d, file=sys.stderr)
            return 2
    if a.sql:
        return max(check_sql(d, a.db, set(a.allow)) for d in a.dirs)
    return check_circles(a.dirs)


if __name__ == '__main__':
    sys.exit(main())
