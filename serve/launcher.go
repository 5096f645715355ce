package serve

// launcherSource is the program that puts a request's files into its jail
// and takes files out after the command, run as the jail's payload
// (python3 -I -S -c launcherSource ARGV...) when a request has files or
// code. It talks to the server over descriptor 3, the jail's channel
// (jail.Spec.Channel): a socket pair, so that no host directory is ever
// shared with the jail (no staging dir a payload could race, nothing
// left behind on the host).
//
// In: one JSON line {"files":[{"path":P,"size":N,"mode":M}],"fetch":[P],
// "fetch_max":N}, then each file's N bytes in order. The launcher writes
// them (directories made as needed), marks descriptor 3 close-on-exec,
// forks and execs ARGV with the signals Python ignores (SIGPIPE, SIGXFSZ)
// set back to their defaults, and waits. Out: one JSON line
// {"files":[{"path":P,"size":N}|{"path":P,"error":E}]}, then the bytes,
// at most fetch_max in all; then it ends as the command did (its exit
// code, or the same signal).
//
// What the launcher sends back is the payload's to forge (the command
// runs as the same user in the same jail): the server reads it as
// hostile data, bounded (readFetched).
const launcherSource = `
import os, sys, json, signal
ch = open(3, 'rb', buffering=1 << 16, closefd=False)
def send(b):
    v = memoryview(b)
    while v:
        n = os.write(3, v)
        v = v[n:]
def main():
    head = json.loads(ch.readline(1 << 24))
    for f in head.get('files', []):
        p, n = f['path'], f['size']
        d = os.path.dirname(p)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(p, 'wb') as out:
            while n > 0:
                b = ch.read(min(n, 1 << 20))
                if not b:
                    sys.exit('rljail launcher: the server sent less than a file')
                out.write(b)
                n -= len(b)
        os.chmod(p, f.get('mode', 0o644))
    os.set_inheritable(3, False)
    argv = sys.argv[1:]
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, ('rljail: %s: %s\n' % (argv[0], e.strerror)).encode())
            os._exit(127 if isinstance(e, FileNotFoundError) else 126)
    _, status = os.waitpid(pid, 0)
    left = head.get('fetch_max', 0)
    meta, blobs = [], []
    for p in head.get('fetch', []):
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            meta.append({'path': p, 'error': e.strerror})
            continue
        try:
            import stat
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                meta.append({'path': p, 'error': 'not a regular file'})
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
            meta.append({'path': p, 'error': 'over the bytes left to fetch'})
            continue
        left -= len(data)
        meta.append({'path': p, 'size': len(data)})
        blobs.append(data)
    send(json.dumps({'files': meta}).encode() + b'\n')
    for b in blobs:
        send(b)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL's action cannot be set, nor need be
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
main()
`
