#!/usr/bin/env python3
"""Finds references in the sources that a reader of the repository cannot
follow: issue numbers ("issue 14", "Issues 13 and 25", "issue 27 item 6")
and files kept outside the repository (DESIGN.md, STYLE.md, API-NOTES.md,
"STYLE item 7"). A comment says why the code is as it is; the tracker's
history and the project's private notes are not part of the tree, so such
a reference explains nothing to whoever reads the file.

  source_comments.py ROOT        exit 1 when a source file under ROOT holds
                                 a reference; lists each as FILE:LINE
  source_comments.py --self-test checks the check on a made-up tree

The sources are every text file of the tree (the files git knows, tracked
or not ignored; without git, every file under ROOT outside build trees)
except Markdown (docs/ and README.md keep their measurement history) and
this script, which names what it looks for.
Standard library only; linear in the size of the sources."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# A line break inside a comment may split a reference: "issue\n * 12".
_GAP = r'(?:[ \t]+|[ \t]*\n[ \t]*(?:\*(?!/)|//|#)?[ \t]*)'
CHECKS = [
    (re.compile(r'\b[Ii]ssues?' + _GAP + r'#?\d+'), 'an issue number'),
    (re.compile(r'\b(?:DESIGN|STYLE|API-NOTES)\.md\b'), 'a file outside the repository'),
    (re.compile(r'\b(?:DESIGN|STYLE)' + _GAP + r'(?:items?|sections?)' + _GAP + r'\d'),
     'a file outside the repository'),
]
SKIP_DIRS = {'.git', '__pycache__', 'Testing', 'node_modules'}
MAX_BYTES = 4 << 20


def git_files(root):
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '-z', '--cached', '--others',
                              '--exclude-standard'], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    names = [n for n in out.stdout.decode('utf-8', 'replace').split('\0') if n]
    return sorted(set(os.path.join(root, n) for n in names))


def walk_files(root):
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith('build') and
                         not os.path.exists(os.path.join(d, x, 'CMakeCache.txt')))
        out += [os.path.join(d, n) for n in sorted(names)]
    return out


def source_text(path):
    """The file's text, or None for Markdown, binaries and very large files."""
    if path.endswith('.md') or not os.path.isfile(path) or os.path.islink(path):
        return None
    if os.path.getsize(path) > MAX_BYTES:
        return None
    with open(path, 'rb') as f:
        raw = f.read()
    if b'\0' in raw:
        return None
    try:
        return raw.decode('utf-8')
    except UnicodeDecodeError:
        return None


def findings(root):
    files = git_files(root)
    if files is None:
        files = walk_files(root)
    out = []
    me = os.path.realpath(__file__)  # this file names what it looks for
    for path in files:
        if os.path.realpath(path) == me:
            continue
        text = source_text(path)
        if text is None:
            continue
        rel = os.path.relpath(path, root)
        for rx, what in CHECKS:
            for m in rx.finditer(text):
                line = text.count('\n', 0, m.start()) + 1
                shown = ' '.join(m.group(0).split())
                out.append((rel, line, shown, what))
    return sorted(set(out))


def report(root):
    found = findings(root)
    for rel, line, shown, what in found:
        print(f'{rel}:{line}: "{shown}": {what}; say the reason itself, or point at docs/')
    if found:
        print(f'{len(found)} reference(s) a reader of the repository cannot follow')
        return 1
    return 0


def self_test():
    planted = {
        'a.c': '/* Checkpoints (issue 14): every N iterations. */\nint a;\n',
        'b.h': '/* what every run did before\n * issue 29 */\n',
        'c/CMakeLists.txt': '# Issues 13 and 25: short functions\n',
        'd.py': '"""The math (DESIGN.md section 4)."""\n',
        'e.h': '/* families (STYLE item\n * 7) */\n',
        'f.cu': '// the reference (STYLE.md 8)\n',
    }
    clean = {
        'ok.c': '/* Checkpoints: every N iterations (docs/operations.md). */\n'
                'static int issues_seen; /* the number of issues: 2 */\n',
        'docs/history.md': 'Issue 29: measured again.\n',
    }
    want = {('a.c', 1), ('b.h', 2), ('c/CMakeLists.txt', 1), ('d.py', 1), ('e.h', 1), ('f.cu', 1)}
    with tempfile.TemporaryDirectory() as root:
        for name, text in list(planted.items()) + list(clean.items()):
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), 'w') as f:
                f.write(text)
        got = {(rel, line) for rel, line, _, _ in findings(root)}
    if got != want:
        print(f'self-test: found {sorted(got)}, expected {sorted(want)}')
        return 1
    print(f'self-test: all {len(want)} planted references found, nothing else')
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('root', nargs='?')
    ap.add_argument('--self-test', action='store_true')
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.root:
        ap.error('ROOT is required')
    return report(os.path.abspath(a.root))


if __name__ == '__main__':
    sys.exit(main())
