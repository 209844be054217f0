#!/usr/bin/env python3
"""Checks the links between the repository's Markdown files.

  check_doc_links.py ROOT        exit 1 when a link or section reference is broken
  check_doc_links.py --self-test checks the checks on a made-up tree

In every .md file under ROOT (build trees and hidden folders left out), each
relative link [text](path) must name a file that exists, and a link with an
anchor (path#anchor, or #anchor within the file) a heading of that Markdown
file, by GitHub's rule for heading anchors (lower case, punctuation other
than '-' and '_' dropped, spaces to '-', '-1', '-2' ... for repeats).
In those files and in the sources (.c .h .cu .py .sh .yaml .in, and
scripts/), a section named in words, as in `docs/performance.md, "The
try-out"`, must be the start of a heading of performance.md or
architecture.md. Each broken one is printed with its file and line.

Standard library only."""
import os
import re
import sys
import tempfile

SKIP_DIRS = ('build', '.', 'node_modules', '__pycache__')
SOURCE_EXT = ('.c', '.h', '.cu', '.py', '.sh', '.yaml', '.in', '.md')
NAMED = ('performance.md', 'architecture.md')
LINK = re.compile(r'(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
QUOTED = re.compile(r'(performance|architecture)\.md\)?,\s*"([^"]+)"')
FENCE = re.compile(r'^(```|~~~).*?^\1', re.M | re.S)
CODE = re.compile(r'`[^`\n]*`')
COMMENT_LEAD = re.compile(r'\n[ \t]*(?:\*(?!/)|#|//)[ \t]?')


def walk(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(SKIP_DIRS)]
        for f in files:
            yield os.path.join(d, f)


def slug(text):
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text).strip().lower()
    return re.sub(r'[^\w\- ]', '', text).replace(' ', '-')


def headings(path):
    """The heading texts of a Markdown file and their anchors."""
    with open(path, encoding='utf-8') as f:
        body = FENCE.sub('', f.read())
    texts, anchors, seen = [], set(), {}
    for m in re.finditer(r'^#{1,6}[ \t]+(.+?)[ \t#]*$', body, re.M):
        texts.append(m.group(1))
        a = slug(m.group(1))
        n = seen.get(a, 0)
        seen[a] = n + 1
        anchors.add(a if n == 0 else '%s-%d' % (a, n))
    return texts, anchors


def line_of(text, pos):
    return text.count('\n', 0, pos) + 1


def check_links(root, path, text, cache, errors):
    blanked = FENCE.sub(lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text)
    blanked = CODE.sub(lambda m: ' ' * len(m.group(0)), blanked)
    for m in LINK.finditer(blanked):
        target = m.group(1)
        if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):
            continue  # http:, https:, mailto: ...
        file_part, _, anchor = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
            if file_part else path
        where = '%s:%d' % (os.path.relpath(path, root), line_of(text, m.start()))
        if not os.path.exists(dest):
            errors.append('%s: link to %s: no such file' % (where, target))
            continue
        if not anchor:
            continue
        if not dest.endswith('.md'):
            errors.append('%s: link to %s: an anchor into a file that is not Markdown'
                          % (where, target))
            continue
        if dest not in cache:
            cache[dest] = headings(dest)
        if anchor not in cache[dest][1]:
            errors.append('%s: link to %s: %s has no heading with that anchor'
                          % (where, target, os.path.relpath(dest, root)))


def check_quoted(root, path, text, cache, errors):
    flat = text if path.endswith('.md') else COMMENT_LEAD.sub('\n', text)
    for m in QUOTED.finditer(flat):
        doc = os.path.join(root, 'docs', m.group(1) + '.md')
        name = ' '.join(m.group(2).replace('`', '').split()).lower()
        if doc not in cache:
            cache[doc] = headings(doc) if os.path.exists(doc) else ([], set())
        if not any(t.replace('`', '').lower().startswith(name) for t in cache[doc][0]):
            errors.append('%s:%d: "%s": no heading of docs/%s.md starts so'
                          % (os.path.relpath(path, root), line_of(flat, m.start()),
                             ' '.join(m.group(2).split()), m.group(1)))


def check(root):
    errors, cache = [], {}
    for path in sorted(walk(root)):
        in_scripts = os.path.relpath(path, root).startswith('scripts' + os.sep)
        if not (path.endswith(SOURCE_EXT) or in_scripts) or \
                os.path.basename(path) == os.path.basename(__file__):
            continue
        try:
            with open(path, encoding='utf-8') as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if path.endswith('.md'):
            check_links(root, path, text, cache, errors)
        if any(n in text for n in NAMED):
            check_quoted(root, path, text, cache, errors)
    return errors


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, 'docs'))
        files = {
            'README.md': '[ok](docs/performance.md#the-try-out-make-run)\n'
                         '[bad](docs/performance.md#gone)\n[missing](docs/none.md)\n'
                         '`[in code](nowhere.md)`\n',
            'docs/performance.md': '# Performance\n## The try-out: `make run`\n'
                                   '```\n# not a heading\n```\n[self](#performance)\n',
            'docs/architecture.md': '# A\n## Coupled channels\n',
            'x.c': '/* docs/architecture.md, "Coupled\n * channels"; docs/performance.md,\n'
                   ' * "The old run" */\n',
        }
        for name, body in files.items():
            with open(os.path.join(root, name), 'w', encoding='utf-8') as f:
                f.write(body)
        got = sorted(e.split(': ', 1)[0] for e in check(root))
        want = ['README.md:2', 'README.md:3', 'x.c:2']
        if got != want:
            print('check_doc_links self-test: expected errors at %s, got %s' % (want, got))
            return 1
    return 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) != 2:
        print(__doc__.split('\n\n')[1])
        return 2
    errors = check(os.path.abspath(argv[1]))
    for e in errors:
        print(e)
    if errors:
        print('%d broken link(s) or section reference(s)' % len(errors))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
