#!/usr/bin/env python3
"""Finds circles of calls between the .c files of a directory, calls and
includes against the order of its layers, and SQL outside a data layer.

A function defined (not static) in file A and used in file B (called, or
named as a callback) gives the edge B -> A. A circle is a set of two or more
files that reach each other along these edges (a strongly connected
component); each is reported with one loop through it. Headers are not
files of their own here: what they declare is defined in some .c file.

  file_circles.py DIR...                 exit 1 when some DIR has a circle,
      or, for a DIR with a LAYERS file, a file that uses a layer above its own
  file_circles.py --self-test            checks both checks on made-up trees
  file_circles.py --sql DIR --db SUBDIR [--allow FILE]...
      exit 1 when a .c file of DIR outside DIR/SUBDIR holds an SQL string
      literal (one that starts with SELECT, INSERT, UPDATE, DELETE, ...),
      unless it is allowed; lists the files and lines. An allowed file that
      holds no SQL any more is reported too (the list is to shrink).

Layers. DIR/LAYERS lists the layers, lowest first, one line each:
"layer: folder folder ..." (folders of DIR, nested ones too, such as
include/base; "#" starts a comment); a file belongs to the layer of the
longest folder that holds it. A file of a layer may call functions defined
in, and include headers of, its own layer and the layers listed before it;
a call of a function defined in a later layer, or an #include "..." that
resolves to a header of a later layer (beside the file, then from DIR,
DIR/common and every listed folder: the library's include paths, so
"prunex/x.h" finds include/<layer>/prunex/x.h), is reported as FILE:LINE
with both layers. A folder of DIR that holds C files but is in no layer is
reported too.

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
    defs, statics, used = set(), set(), {}
    depth = 0
    prev = []          # (token, line) at depth 0 since the last ';' or '}'
    for tok, line in tokens(path):
        if tok.startswith(('/*', '//')):
            continue
        if tok == '{':
            if depth == 0:
                # a function body: NAME ( ... ) {
                name = None
                lvl = 0
                for i in range(len(prev) - 1, -1, -1):
                    t = prev[i][0]
                    if t == ')':
                        lvl += 1
                    elif t == '(':
                        lvl -= 1
                        if lvl == 0 and i > 0 and re.match(r'[A-Za-z_]\w*$', prev[i - 1][0]):
                            name = prev[i - 1][0]
                            break
                words = [t for t, _ in prev]
                if name and '=' not in words and words[-1:] == [')']:
                    (statics if 'static' in words else defs).add(name)
            depth += 1
            prev = []
            continue
        if tok == '}':
            depth -= 1
            prev = []
            continue
        if depth == 0:
            if tok == ';':
                for t, ln in prev:
                    if re.match(r'[A-Za-z_]\w*$', t):
                        used.setdefault(t, ln)  # initialisers of tables name callbacks
                prev = []
            else:
                prev.append((tok, line))
            continue
        if re.match(r'[A-Za-z_]\w*$', tok) and tok not in KEYWORDS:
            used.setdefault(tok, line)
    return defs, statics, used


def owners(info):
    """Each external function's defining file (the first, for a stub and
    its real twin)."""
    owner = {}
    for f, (defs, _, _) in sorted(info.items()):
        for d in defs:
            owner.setdefault(d, f)
    return owner


def graph(root):
    files = c_files(root)
    info = {f: scan(f) for f in files}
    owner = owners(info)
    edges = {f: {} for f in files}
    for f, (defs, statics, used) in info.items():
        for name in set(used) - defs - statics:
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


def read_layers(path):
    """([layer, ...] lowest first, {folder: layer}) of a LAYERS file;
    ValueError naming the line of a malformed one."""
    order, folder_layer = [], {}
    with open(path, encoding='utf-8') as f:
        for no, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            m = re.match(r'([a-z_]+):((?:\s+[\w./-]+)+)$', line)
            if not m:
                raise ValueError('%s:%d: expected "layer: folder ...", got %r' % (path, no, line))
            layer, folders = m.group(1), m.group(2).split()
            if layer in order:
                raise ValueError('%s:%d: layer %s listed twice' % (path, no, layer))
            for d in folders:
                if d in folder_layer:
                    raise ValueError('%s:%d: folder %s listed twice' % (path, no, d))
                folder_layer[d] = layer
            order.append(layer)
    return order, folder_layer


INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def includes(path):
    """(header as written, line) of each #include "..." of path."""
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    return [(m.group(1), text.count('\n', 0, m.start()) + 1) for m in INCLUDE.finditer(text)]


def check_layers(root):
    """Calls and includes of root's files against root/LAYERS."""
    try:
        order, folder_layer = read_layers(os.path.join(root, 'LAYERS'))
    except (OSError, ValueError) as e:
        print(e)
        return 1
    rank = {layer: i for i, layer in enumerate(order)}
    bad = []

    def folder_of(path):
        """The longest listed folder that holds path, else its first
        folder ('' at the top)."""
        parts = os.path.relpath(path, root).split(os.sep)[:-1]
        for n in range(len(parts), 0, -1):
            if '/'.join(parts[:n]) in folder_layer:
                return '/'.join(parts[:n])
        return parts[0] if parts else ''

    def layer_of(path):
        return folder_layer.get(folder_of(path))

    sources = []
    for d, _, names in os.walk(root):
        sources += [os.path.join(d, n) for n in sorted(names) if n.endswith(('.c', '.h', '.cu'))]
    for folder in sorted({folder_of(f) for f in sources}):
        if folder not in folder_layer:
            bad.append('%s/%s: a folder of C files in no layer (name it in %s)'
                       % (root, folder or '.', os.path.join(root, 'LAYERS')))
    for folder in sorted(folder_layer):
        if not os.path.isdir(os.path.join(root, folder)):
            bad.append('%s: LAYERS names %s, which is no folder of %s' % (root, folder, root))
    files = c_files(root)
    info = {f: scan(f) for f in files}
    owner = owners(info)
    for f, (defs, statics, used) in sorted(info.items()):
        mine = layer_of(f)
        if mine is None:
            continue
        for name in sorted(set(used) - defs - statics, key=lambda n: used[n]):
            g = owner.get(name)
            theirs = layer_of(g) if g else None
            if theirs is not None and rank[theirs] > rank[mine]:
                bad.append('%s:%d: %s layer calls %s of %s, %s layer (above %s)'
                           % (f, used[name], mine, name, os.path.relpath(g, root), theirs, mine))
    search = [root, os.path.join(root, 'common')] + [os.path.join(root, d)
                                                      for d in sorted(folder_layer)]
    for f in sources:
        mine = layer_of(f)
        if mine is None:
            continue
        for header, line in includes(f):
            for base in [os.path.dirname(f)] + search:
                h = os.path.normpath(os.path.join(base, header))
                if os.path.isfile(h):
                    break
            else:
                continue  # generated or outside root (onnx.pb-c.h, prunex.pb-c.h)
            theirs = layer_of(h)
            if theirs is not None and rank[theirs] > rank[mine]:
                bad.append('%s:%d: %s layer includes %s, %s layer (above %s)'
                           % (f, line, mine, os.path.relpath(h, root), theirs, mine))
    for b in bad:
        print(b)
    if not bad:
        print('%s: every call and include keeps to the layers %s' % (root, ' < '.join(order)))
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
    failures += self_test_layers()
    for f in failures:
        print('self-test: ' + f)
    print('self-test: %s' % ('FAILED' if failures else 'ok'))
    return 1 if failures else 0


def self_test_layers():
    """The layer check on a made-up library: a low file that calls up, one
    that includes up beside it and one that includes up through a layer's
    header folder are named with file:line and both layers, calls and
    includes down pass, and a folder in no layer is reported."""
    import contextlib
    import io
    import tempfile
    tree = {
        'LAYERS': '# lowest first\nlow: base include/low\nhigh: top include/high\n',
        'include/low/api/base.h': 'int base_run(void);\n',
        'include/high/api/top.h': '#include "api/base.h"\nint top_run(void);\n',
        'base/b.c': '#include "api/base.h"\nint base_run(void) { return 0; }\n',
        'top/t.c': '#include "base/b_int.h"\n#include "api/top.h"\n'
                   'int top_run(void) { return base_run(); }\n',
        'base/b_int.h': '#define B 1\n',
        'top/t_int.h': '#define T 1\n',
    }
    failures = []
    with tempfile.TemporaryDirectory() as root:
        def write(name, text):
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), 'w') as f:
                f.write(text)
        for name, text in tree.items():
            write(name, text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = check_layers(root)
        if rc != 0:
            failures.append('check_layers failed a tree that keeps its layers: ' + out.getvalue())
        write('base/up.c', '#include "top/t_int.h"\n#include "api/top.h"\n'
                           'int base_up(void) {\n  return top_run();\n}\n')
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = check_layers(root)
        text = out.getvalue()
        for want in ['base/up.c:4: low layer calls top_run of top/t.c, high layer (above low)',
                     'base/up.c:1: low layer includes top/t_int.h, high layer (above low)',
                     'base/up.c:2: low layer includes include/high/api/top.h, high layer']:
            if rc != 1 or want not in text:
                failures.append('check_layers did not report %r: %s' % (want, text))
        os.remove(os.path.join(root, 'base/up.c'))
        write('loose/l.c', 'int loose(void) { return 0; }\n')
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = check_layers(root)
        if rc != 1 or 'loose: a folder of C files in no layer' not in out.getvalue():
            failures.append('check_layers passed loose/, a folder in no layer: ' + out.getvalue())
    return failures


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
    layered = [d for d in a.dirs if os.path.isfile(os.path.join(d, 'LAYERS'))]
    return max([check_circles(a.dirs)] + [check_layers(d) for d in layered])


if __name__ == '__main__':
    sys.exit(main())
