package integration

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// aclNamedUsers reads, from the host, the uids named in the access ACL of
// path (system.posix_acl_access: a version, then entries of a 16-bit tag,
// 16-bit permissions and a 32-bit id; tag 2 is a named user): none when
// it has no ACL.
func aclNamedUsers(t testing.TB, path string) []uint32 {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Lgetxattr(path, "system.posix_acl_access", buf)
	if errors.Is(err, unix.ENODATA) {
		return nil
	}
	if err != nil {
		t.Fatalf("read the ACL of %s: %v", path, err)
	}
	var ids []uint32
	for p := buf[4:n]; len(p) >= 8; p = p[8:] {
		if binary.LittleEndian.Uint16(p) == 2 {
			ids = append(ids, binary.LittleEndian.Uint32(p[4:]))
		}
	}
	return ids
}

// ownerOf is path's owner uid and gid, read from the host (lstat).
func ownerOf(t testing.TB, path string) (uid, gid int, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid), fi.Mode()
}

// TestWritableVolumeOwner replays issue 30: the README's packages example,
// `mkdir out; rljail -v "$PWD/out:/out:rw" -- ...`, as root, failed with
// a PermissionError in the payload (the jail is a host uid of its own,
// which may not write root's 0755 directory), and so did every docker
// `-v`. The jail must write there, and the file must be, on the host, the
// volume owner's where that is safe: the user's for a directory of a
// user's (the jail writes as its owner), the invoking user's rootless; in
// root's directory nobody's, never root's (a file root owns is trusted by
// root's programs for its owner alone: sudoers.d, cron.d, authorized_keys). No ACL entry of the jail's may be left on
// the directory, whose mode stays what it was.
func TestWritableVolumeOwner(t *testing.T) {
	write := `open('/out/x', 'w').write('hi')`
	type volume struct {
		name     string
		uid, gid int // the owner of out/
		// the owner of what the jail wrote, after the run
		fileUID, fileGID int
	}
	for _, m := range bothModes {
		vols := []volume{{"own", testUID, testGID, testUID, testGID}}
		if m == asRoot {
			vols = []volume{{"mkdir_as_root", 0, 0, 65534, 65534}, {"users", testUID, testGID, testUID, testGID}}
		}
		for _, v := range vols {
			for _, via := range []string{"rljail", "docker"} {
				t.Run(string(m)+"/"+v.name+"/"+via, func(t *testing.T) {
					t.Parallel()
					dir := newDir(t)
					if m == asRootless {
						if err := os.Chown(dir, testUID, testGID); err != nil {
							t.Fatal(err)
						}
					}
					out := filepath.Join(dir, "out")
					if err := os.Mkdir(out, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.Chown(out, v.uid, v.gid); err != nil {
						t.Fatal(err)
					}
					var stdout, stderr string
					var exit int
					if via == "rljail" {
						stdout, stderr, exit, _ = runJail(t, m, runOpts{dir: dir}, "-v", out+":/out:rw", "--", "python3", "-c", write)
					} else {
						r := dockerRun(t, m, dir, "", "run", "--rm", "-v", out+":/out", "python:3.11-slim", "python3", "-c", write)
						stdout, stderr, exit = r.stdout, r.stderr, r.exit
					}
					if exit != 0 || strings.Contains(stderr, "PermissionError") {
						t.Fatalf("the payload could not write the writable volume (owned by %d:%d, 0755): exit %d\nstdout %q\nstderr %q", v.uid, v.gid, exit, stdout, stderr)
					}
					x := filepath.Join(out, "x")
					if b, err := os.ReadFile(x); err != nil || string(b) != "hi" {
						t.Fatalf("out/x on the host holds %q, %v; want hi", b, err)
					}
					if uid, gid, _ := ownerOf(t, x); uid != v.fileUID || gid != v.fileGID {
						t.Errorf("out/x on the host is %d:%d; want %d:%d (the volume is %d:%d)", uid, gid, v.fileUID, v.fileGID, v.uid, v.gid)
					}
					if ids := aclNamedUsers(t, out); len(ids) > 0 {
						t.Errorf("out/ keeps ACL entries for uids %v after the run", ids)
					}
					if _, _, mode := ownerOf(t, out); mode.Perm() != 0o755 {
						t.Errorf("out/ is %v after the run, want 0755 as it was", mode)
					}
					if strings.Contains(stderr, out) {
						t.Errorf("a plain writable volume gave a notice: %q", stderr)
					}
				})
			}
		}
	}
}
