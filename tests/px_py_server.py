#!/usr/bin/python3
"""The tests' Python in one process: px_test_py (tests/px_test_util.c) starts
this once per test program and sends it command lines, so that PyTorch and
ONNX are imported once, not once per reference (about 2 s a start on the
2-core CI machine; test_onnx_import makes about 100 of them).

  px_py_server.py FD
      FD: one end of a socket pair. Each request is a decimal length, a
      newline and that many bytes: the command line (what would follow
      "python3 " in a shell), the working directory and the environment
      ("NAME=value"), separated by NUL bytes. The answer is the exit
      status and a newline. The command line is a script with its
      arguments, "-c CODE ARGS" or "-m MODULE ARGS", optionally followed by
      ">/dev/null" and "2>/dev/null" or "2>&1" (the only shell syntax taken).

Each command runs as in a fresh process as far as the tests can tell: the
given directory and environment, sys.argv, the random generators as they
were at start, __name__ "__main__"; its modules stay imported. A request the
server cannot parse answers 2 with the reason on stderr. EOF ends it.
"""
import contextlib
import gc
import os
import random
import runpy
import shlex
import socket
import sys
import traceback

PRELOAD = ("numpy", "torch", "onnx")


def preload():
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass


def rng_states():
    states = {"random": random.getstate()}
    if "numpy" in sys.modules:
        states["numpy"] = sys.modules["numpy"].random.get_state()
    if "torch" in sys.modules:
        states["torch"] = sys.modules["torch"].get_rng_state()
    return states


def restore(states):
    random.setstate(states["random"])
    if "numpy" in states:
        sys.modules["numpy"].random.set_state(states["numpy"])
    if "torch" in states:
        sys.modules["torch"].set_rng_state(states["torch"])


def split(line):
    """(argv, quiet stdout, quiet stderr) of a command line, or a reason."""
    try:
        args = shlex.split(line)
    except ValueError as e:
        return "cannot split %r: %s" % (line, e)
    redirs = []
    while args and args[-1] in (">/dev/null", "2>/dev/null", "2>&1"):
        redirs.insert(0, args.pop())
    out = err = False
    for tok in redirs:  # in the shell's order: ">/dev/null 2>&1" silences both
        if tok == ">/dev/null":
            out = True
        else:
            err = tok == "2>/dev/null" or out
    for a in args:
        if a in ("|", "||", "&&", ";", "&") or a.startswith((">", "<", "2>")):
            return "shell syntax %r in %r: not taken (a script, -c or -m only)" % (a, line)
    if not args or (args[0] in ("-c", "-m") and len(args) < 2):
        return "no command in %r" % line
    return args, out, err


def execute(args):
    if args[0] == "-c":
        sys.argv = ["-c"] + args[2:]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    elif args[0] == "-m":
        sys.argv = [args[1]] + args[2:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


def exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run(line, cwd, env, states):
    parsed = split(line)
    if isinstance(parsed, str):
        print("px_py_server: " + parsed, file=sys.stderr)
        return 2
    args, quiet_out, quiet_err = parsed
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(e.split("=", 1) for e in env if "=" in e)
    restore(states)
    path, argv = list(sys.path), list(sys.argv)
    with open(os.devnull, "w") as null, contextlib.ExitStack() as stack:
        if quiet_out:
            stack.enter_context(contextlib.redirect_stdout(null))
        if quiet_err:
            stack.enter_context(contextlib.redirect_stderr(null))
        try:
            execute(args)
            rc = 0
        except SystemExit as e:
            rc = exit_status(e.code)
        except BaseException:  # the script's failure is its exit status
            traceback.print_exc()
            rc = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.path[:], sys.argv[:] = path, argv
    gc.collect()  # a reference's tensors go back before the test goes on
    return rc


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    sock = socket.socket(fileno=int(argv[1]))
    rd, wr = sock.makefile("rb"), sock.makefile("wb")
    preload()
    states = rng_states()
    while True:
        head = rd.readline()
        if not head:
            return 0
        fields = rd.read(int(head)).decode().split("\0")
        rc = run(fields[0], fields[1], fields[2:], states)
        wr.write(b"%d\n" % rc)
        wr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
