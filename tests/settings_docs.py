#!/usr/bin/env python3
"""settings_docs: the man pages and docs list the settings the programs have.

pxcoordd, pxagent and pxworker read their flags and config-file keys from one
table each (prunex/settings.h), and print that table as --help. This test
reads the built programs' --help and checks, both ways, that
  - the OPTIONS section of deploy/man/PROGRAM.8 has one entry (.TP) per flag,
    and no entry for a flag the program lacks; the config-file keys without a
    flag (share.NAME, ...) appear in the page;
  - docs/operations.md's tables of "PROGRAM key"s list every config-file key
    (a flag not marked "flag only", with underscores, and the keys without a
    flag), and no key the program lacks;
  - every flag coordinatord/README.md names exists.
One line per problem, exit 1. With --self-test it first checks that a man
page with an entry taken out and a docs table with a row taken out fail.

Usage: settings_docs.py BUILD_DIR SOURCE_DIR [--self-test]
"""
import os
import re
import subprocess
import sys

PROGRAMS = {'pxcoordd': 'coordinatord/pxcoordd', 'pxagent': 'agent/pxagent',
            'pxworker': 'agent/pxworker'}


def help_settings(text):
    """(flags, keys) of a --help text: every --flag of the options, and the
    config-file keys (flags not marked flag only, underscored, plus the keys
    without a flag, NAME for a per-user suffix)."""
    entries = []  # [section, head, text]
    section = None
    for line in text.split('\n'):
        if line.startswith('Options'):
            section = 'flags'
        elif line.startswith('Config-file keys without a flag'):
            section = 'keys'
        elif not line.startswith('  '):
            section = None
        elif section and line.startswith('   ') and entries:
            entries[-1][2] += ' ' + line.strip()
        elif section:
            entries.append([section, line.strip(), ''])
    flags, keys = set(), set()
    configurable = 'config-file key' in text
    for section, head, body in entries:
        if section == 'flags':
            flag = head.split(' ')[0]
            if not re.match(r'^--[a-z][a-z0-9-]*$', flag):
                continue  # "--help, --version"
            flags.add(flag)
            if configurable and '(flag only)' not in (head + ' ' + body):
                keys.add(flag[2:].replace('-', '_'))
        else:
            keys.add(head.split(' ')[0])
    return flags, keys


def man_options(text):
    """The flags of the OPTIONS section's entries (the line after each .TP)."""
    m = re.search(r'^\.SH OPTIONS\n(.*?)^\.SH ', text, re.S | re.M)
    if not m:
        return None
    lines = m.group(1).split('\n')
    flags = set()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == '.TP':
            for flag in re.findall(r'\\-\\-[a-z][a-z0-9\\-]*', lines[i + 1]):
                flags.add(flag.replace('\\-', '-'))
    return flags - {'--help', '--version'}


def plain(roff):
    return re.sub(r'\\f[BIRP]|\\-|\\&|"', lambda m: '-' if m.group(0) == '\\-' else '', roff)


def docs_keys(text, program):
    """The keys of the tables whose header is "| PROGRAM key |"."""
    keys = set()
    on = False
    for line in text.split('\n'):
        if line.startswith('| %s key ' % program):
            on = True
            continue
        if not line.startswith('|'):
            on = False
            continue
        if on and not line.startswith('| ---'):
            first = line.split('|')[1]
            for k in re.findall(r'`([^`]+)`', first):
                if not k.startswith('--'):
                    keys.add(k)
    return keys


def check(program, help_text, man_text, docs_text):
    problems = []
    flags, keys = help_settings(help_text)
    if len(flags) < 5:
        return ['%s --help: only %d flags read' % (program, len(flags))]
    man = man_options(man_text)
    if man is None:
        return ['%s.8: no OPTIONS section' % program]
    for f in sorted(flags - man):
        problems.append('%s.8: OPTIONS has no entry for %s' % (program, f))
    for f in sorted(man - flags):
        problems.append('%s.8: OPTIONS has an entry for %s, which %s lacks' % (program, f, program))
    flat = plain(man_text)
    for k in sorted(k for k in keys if '.' in k):
        prefix, suffix = k.split('.', 1)  # ".BI share. NAME" reads share.NAME
        if not re.search(re.escape(prefix + '.') + r'\s*' + re.escape(suffix), flat):
            problems.append('%s.8: the config-file key %s is not named' % (program, k))
    if program == 'pxworker':
        return problems  # flags only: no config file
    documented = docs_keys(docs_text, program)
    for k in sorted(keys - documented):
        problems.append('docs/operations.md: no "%s key" row for %s' % (program, k))
    for k in sorted(documented - keys):
        problems.append('docs/operations.md: a "%s key" row for %s, which %s lacks'
                        % (program, k, program))
    return problems


def self_test(program, help_text, man_text, docs_text):
    """A man entry and a docs row taken out must each be found missing."""
    m = re.search(r'^\.TP\n\.BI? (\\-\\-[a-z\\-]+).*\n', man_text, re.M)
    cut_man = man_text[:m.start()] + man_text[m.end():]
    flag = m.group(1).replace('\\-', '-')
    got = check(program, help_text, cut_man, docs_text)
    if not any(flag in p for p in got):
        return ['self-test: %s.8 without %s passed: %s' % (program, flag, got)]
    if program == 'pxworker':
        return []
    row = re.search(r'^\| `([a-z_]+)` \|.*\n', docs_text.split('| %s key ' % program, 1)[1], re.M)
    cut_docs = docs_text.replace(row.group(0), '', 1)
    got = check(program, help_text, man_text, cut_docs)
    if not any(row.group(1) in p for p in got):
        return ['self-test: operations.md without %s passed' % row.group(1)]
    return []


def main():
    build, src = sys.argv[1], sys.argv[2]
    selftest = '--self-test' in sys.argv[3:]
    docs_text = open(os.path.join(src, 'docs/operations.md')).read()
    problems = []
    coord_flags = set()
    for program, path in PROGRAMS.items():
        exe = os.path.join(build, path)
        help_text = subprocess.run([exe, '--help'], capture_output=True, text=True,
                                   check=True).stdout
        man_text = open(os.path.join(src, 'deploy/man/%s.8' % program)).read()
        if selftest:
            problems += self_test(program, help_text, man_text, docs_text)
        problems += check(program, help_text, man_text, docs_text)
        if program == 'pxcoordd':
            coord_flags = help_settings(help_text)[0]
    readme = open(os.path.join(src, 'coordinatord/README.md')).read()
    named = re.findall(r'^\| `(--[a-z][a-z0-9-]*)', readme, re.M)  # the flags table
    for f in sorted(set(named) - coord_flags -
                    {'--help', '--version'}):
        problems.append('coordinatord/README.md names %s, which pxcoordd lacks' % f)
    for p in problems:
        print(p)
    print('%d problem(s)' % len(problems))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
