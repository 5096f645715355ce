_fresh = dict(globals())  # __main__ as `python3 -c` makes it, before any name of ours
import sys
memmove = None
if not sys.flags.isolated:
    # The retitle's memmove, from _ctypes itself (kept loaded: an extension
    # module is not loaded twice): the ctypes package costs a waiting
    # launcher 1.2 ms more of CPU. The three types are ctypes' own
    # c_void_p, c_char_p and c_size_t.
    try:
        import _ctypes

        class _Ptr(_ctypes._SimpleCData):
            _type_ = 'P'

        class _Bytes(_ctypes._SimpleCData):
            _type_ = 'z'

        class _Size(_ctypes._SimpleCData):
            _type_ = 'L'

        class _Memmove(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Ptr
            _argtypes_ = (_Ptr, _Bytes, _Size)

        memmove = _Memmove(_ctypes._memmove_addr)
    except (ImportError, AttributeError, TypeError):
        pass
_loaded = set(sys.modules)
import os, _signal

# rljail serve's launcher: the payload of a request's jail that puts the
# request's files in and takes files out after the command, talking to
# the server over descriptor 3 (the jail's channel). See launcher.go for
# the records. Two ways to run:
#
# - cold: python3 -I -S -c LAUNCHER ARGV...: init gave this process the
#   request's environment and limits; it writes the files, forks and
#   execs ARGV, waits, sends the fetched files, ends as ARGV did.
# - ahead (the warm pool): python3 -c LAUNCHER, started before its request
#   arrived; the request's argv, environment, working directory and
#   limits come on the channel too. The child applies them, and where the
#   command is this interpreter running a -c program or a script, with
#   nothing that Python reads at its start changed, it runs the program
#   itself, as a fresh interpreter would (its own __main__, argv, path,
#   environment, the modules of a fresh start); anything else is execed.
#
# Only the standard library's builtin modules: json, signal and stat cost
# a cold launcher more than the rest of its start.

AHEAD = not sys.flags.isolated
if AHEAD:
    import resource
    # What a request would otherwise wait for: the interpreter's path, and
    # the compiler's first use (its tables are made lazily, 0.8 ms).
    EXE = os.path.realpath(os.fsencode(sys.executable))
    compile('import os\nx = [1]\ndef f(a, *b, **c):\n    return a\n', '<string>', 'exec', dont_inherit=True)
ch = open(3, 'rb', buffering=1 << 16, closefd=False)


def fail(msg):
    os.write(2, b'rljail launcher: ' + msg.encode() + b'\n')
    os._exit(125)


def take(n):
    b = ch.read(n) if n else b''
    if len(b) != n:
        fail('the server sent less than it announced')
    return b


def send(b):
    v = memoryview(b)
    while v:
        n = os.write(3, v)
        v = v[n:]


def read_head():
    h = {'files': [], 'fetch': [], 'fetch_max': 0, 'argv': [], 'env': [],
         'rlimits': [], 'workdir': None, 'nice': 0}
    while True:
        line = ch.readline(256)
        if not line.endswith(b'\n'):
            fail('the server sent a broken record')
        f = line.split()
        try:
            t, n = f[0], [int(x) for x in f[1:]]
        except (IndexError, ValueError):
            fail('the server sent a broken record')
        if t == b'.':
            return h
        elif t == b'f':
            h['files'].append((take(n[0]), n[1], n[2]))
        elif t == b'g':
            h['fetch'].append(take(n[0]))
        elif t == b'm':
            h['fetch_max'] = n[0]
        elif t == b'a':
            h['argv'].append(take(n[0]))
        elif t == b'e':
            h['env'].append(take(n[0]))
        elif t == b'w':
            h['workdir'] = take(n[0])
        elif t == b'r':
            h['rlimits'].append((n[0], n[1], n[2]))
        elif t == b'n':
            h['nice'] = n[0]
        else:
            fail('the server sent an unknown record')


def write_files(h):
    for p, n, mode in h['files']:
        d = os.path.dirname(p)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(p, 'wb') as out:
            while n > 0:
                b = ch.read(min(n, 1 << 20))
                if not b:
                    fail('the server sent less than a file')
                out.write(b)
                n -= len(b)
        os.chmod(p, mode)


# What Python reads from the environment as it starts: a request that
# changes any of it gets a fresh interpreter.
def startup_var(k):
    return k.startswith(b'PYTHON') or k.startswith(b'LC_') or k in (b'LANG', b'LANGUAGE')


def plan_here(argv, env):
    """('c', code, sys.argv) or ('f', path, sys.argv) where this
    interpreter can run argv itself, else None."""
    prog = argv[0]
    if b'/' in prog:
        path = prog
    else:
        path = None
        for d in env.get(b'PATH', b'').split(b':'):
            p = os.path.join(d or b'.', prog)
            if os.access(p, os.X_OK) and not os.path.isdir(p):
                path = p
                break
        if path is None:
            return None
    try:
        if os.path.realpath(path) != EXE:
            return None
    except (OSError, ValueError):
        return None
    now = os.environb
    for k in set(now) | set(env):
        if startup_var(k) and now.get(k) != env.get(k):
            return None
    rest = argv[1:]
    if len(rest) >= 2 and rest[0] == b'-c':
        return ('c', rest[1], [b'-c'] + rest[2:])
    if rest and not rest[0].startswith(b'-'):
        return ('f', rest[0], rest)
    return None


def retitle(argv, env):
    """Write argv and env over this process's own (as setproctitle does),
    so that /proc/PID/cmdline and environ show the request's program as
    a fresh interpreter's would, as far as the launcher's fit (its argv
    is its source; the server gives it room in its environment)."""
    if memmove is None:
        return
    try:
        with open('/proc/self/stat', 'rb') as f:
            st = f.read()
        a0, a1, e0, e1 = (int(x) for x in st[st.rindex(b')') + 2:].split()[45:49])
        for lo, hi, items in ((a0, a1, argv), (e0, e1, [k + b'=' + v for k, v in env.items()])):
            n = hi - lo
            if n > 0:
                b = (b'\0'.join(items) + b'\0')[:n - 1].ljust(n, b'\0')
                memmove(lo, b, n)
    except (OSError, ValueError, IndexError):
        pass


def run_here(plan, argv, env):
    """Run plan in this process as `python3 argv` would; returns only
    where it cannot (the caller then execs argv)."""
    kind, what, args = plan
    try:
        if kind == 'c':
            name, src = '<string>', os.fsdecode(what)
        else:
            name = os.fsdecode(os.path.abspath(what))
            with open(what, 'rb') as f:
                src = f.read()
        code = compile(src, name, 'exec', dont_inherit=True)
    except Exception:
        return  # the interpreter itself says what is wrong with it
    os.close(3)
    g = dict(_fresh)
    g['__annotations__'] = {}
    if kind == 'f':
        g['__file__'], g['__cached__'] = name, None
        g['__loader__'] = sys.modules['_frozen_importlib_external'].SourceFileLoader('__main__', name)
        sys.path[0] = os.path.dirname(os.path.realpath(name))
    main = type(sys)('__main__')
    main.__dict__.update(g)
    for m in list(sys.modules):
        if m not in _loaded:
            del sys.modules[m]
    sys.modules['__main__'] = main
    sys.argv = [os.fsdecode(a) for a in args]
    sys.orig_argv = [os.fsdecode(a) for a in argv]
    os.environ.clear()
    for k, v in env.items():
        os.environb[k] = v
    retitle(argv, env)
    try:
        exec(code, main.__dict__)
    except SystemExit as e:
        finish(exit_code(e))
    except BaseException as e:
        # As the interpreter ends on an uncaught exception: the hook's
        # traceback (from the program's own frames), status 1, or the
        # signal for KeyboardInterrupt.
        tb = e.__traceback__.tb_next if e.__traceback__ else None
        e.__traceback__ = tb
        sys.excepthook(type(e), e, tb)
        kbd = isinstance(e, KeyboardInterrupt)
        e = tb = None
        finish(1, _signal.SIGINT if kbd else 0)
    finish(0)


def exit_code(e):
    """The status the interpreter ends with for SystemExit e (its
    handle_system_exit): None 0, an int itself, else printed and 1."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xff
    try:
        sys.stderr.write(str(code) + '\n')
    except Exception:
        pass
    return 1


def finish(code, sig=0):
    """End as the interpreter's finalization would to any observer
    (threads joined, atexit handlers run, the standard streams flushed;
    status 120 where a flush fails), without its teardown of every
    object, which in a forked child touches, and so copies, every page
    of the launcher's interpreter."""
    t = sys.modules.get('threading')
    if t is not None:
        try:
            t._shutdown()
        except BaseException:
            pass
    import atexit
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None:
                f.flush()
        except Exception:
            code = 120 if code == 0 else code
    if sig:
        _signal.signal(sig, _signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(code)


def child(h, argv):
    env = None
    if AHEAD:
        env = dict(kv.split(b'=', 1) for kv in h['env'] if b'=' in kv)
        try:
            for r, soft, hard in h['rlimits']:
                resource.setrlimit(r, (soft, hard))
            if h['nice'] > os.getpriority(os.PRIO_PROCESS, 0):
                os.setpriority(os.PRIO_PROCESS, 0, h['nice'])
            if h['workdir'] is not None:
                os.chdir(h['workdir'])
        except (OSError, ValueError) as e:
            fail('apply the request: %s' % e)
        plan = plan_here(argv, env)
        if plan:
            run_here(plan, argv, env)
    # The channel closes at the exec; init's refusals of a command it
    # cannot run are the server's to say (a setup error), as in a one-shot
    # run: "E CODE ERRNO" (ERRNO 0: look_path's).
    code = look_path(argv[0], env if env is not None else os.environb)
    if code:
        send(b'E %d 0\n' % code)
        os._exit(code)
    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
    try:
        if env is None:
            os.execvp(argv[0], argv)
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        code = 127 if isinstance(e, FileNotFoundError) else 126
        send(b'E %d %d\n' % (code, e.errno or 0))
        os._exit(code)


def fetch(h):
    left = h['fetch_max']
    out = []
    for p in h['fetch']:
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            err = (e.strerror or str(e)).encode()
            out.append(b'x %d %d\n%s%s' % (len(p), len(err), p, err))
            continue
        try:
            if os.fstat(fd).st_mode & 0o170000 != 0o100000:
                err = b'not a regular file'
                out.append(b'x %d %d\n%s%s' % (len(p), len(err), p, err))
                continue
            data = b''
            while len(data) <= left:
                b = os.read(fd, min(1 << 20, left + 1 - len(data)))
                if not b:
                    break
                data += b
        finally:
            os.close(fd)
        if len(data) > left:
            err = b'over the bytes left to fetch'
            out.append(b'x %d %d\n%s%s' % (len(p), len(err), p, err))
            continue
        left -= len(data)
        out.append(b'f %d %d\n%s' % (len(p), len(data), p))
        out.append(data)
    out.append(b'.\n')
    for b in out:
        send(b)


def look_path(name, env):
    """None, or the exit code (126, 127) with which init refuses a
    command it cannot find on the payload's PATH (look_path in init.c)."""
    if b'/' in name:
        return None
    not_exec = False
    for d in env.get(b'PATH', b'/usr/local/bin:/usr/bin:/bin').split(b':'):
        p = (d or b'.') + b'/' + name
        try:
            st = os.stat(p)
        except (OSError, ValueError):
            continue
        if st.st_mode & 0o170000 != 0o040000:
            if st.st_mode & 0o111:
                return None
            not_exec = True
    return 126 if not_exec else 127


def main():
    h = read_head()
    write_files(h)
    os.set_inheritable(3, False)
    argv = h['argv'] if AHEAD else [os.fsencode(a) for a in sys.argv[1:]]
    if not argv:
        fail('the server sent no command')
    if AHEAD and not h['fetch']:
        # Nothing to take out afterwards: the program runs, or is execed,
        # in this process, as init's payload (pid 2, as in a one-shot run).
        child(h, argv)
        os._exit(126)
    pid = os.fork()
    if pid == 0:
        child(h, argv)
        os._exit(126)
    _, status = os.waitpid(pid, 0)
    fetch(h)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            _signal.signal(sig, _signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL's action cannot be set, nor need be
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


main()
