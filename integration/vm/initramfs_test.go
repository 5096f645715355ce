package vm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpioWriter writes an uncompressed cpio archive in the "newc" format, the
// one the kernel unpacks as an initramfs (Documentation/driver-api/
// early-userspace/buffer-format.rst). Uncompressed, because gunzip in an
// emulated CPU costs more boot time than qemu's reading of a larger file.
//
// Every entry is owned by root, whoever builds the archive: the VM is a
// fresh host whose files belong to root. Parents must be written before
// their children; mkdirAll does that for the directories it is given.
type cpioWriter struct {
	w    *bufio.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

func newCpioWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), ino: 1, dirs: map[string]bool{"": true, ".": true}}
}

// Unix file type bits of the newc mode field.
const (
	cpioFIFO = 0o010000
	cpioChr  = 0o020000
	cpioDir  = 0o040000
	cpioBlk  = 0o060000
	cpioReg  = 0o100000
	cpioLnk  = 0o120000
)

// header writes one entry's header and name. name is relative ("bin/sh").
func (c *cpioWriter) header(name string, mode uint32, nlink uint32, mtime time.Time, size int64, rdevMajor, rdevMinor uint32) {
	if c.err != nil {
		return
	}
	if size > 0xffffffff {
		c.err = fmt.Errorf("cpio: %s: %d bytes is too large for newc", name, size)
		return
	}
	sec := mtime.Unix()
	if sec < 0 || sec > 0xffffffff {
		sec = 0
	}
	ino := c.ino
	c.ino++
	fmt.Fprintf(c.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, uint32(sec), uint32(size), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.w.WriteString(name)
	c.w.WriteByte(0)
	c.pad(110 + len(name) + 1)
}

// pad writes zeros up to the next multiple of four after n bytes.
func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.w.Write(make([]byte, 4-r))
	}
}

// mkdirAll writes name and any missing parents as directories of mode perm.
func (c *cpioWriter) mkdirAll(name string, perm fs.FileMode) {
	name = path.Clean(name)
	if c.dirs[name] {
		return
	}
	c.mkdirAll(path.Dir(name), 0o755)
	c.header(name, cpioDir|unixPerm(perm), 2, time.Unix(0, 0), 0, 0, 0)
	c.dirs[name] = true
}

// file writes a regular file of size bytes read from r.
func (c *cpioWriter) file(name string, perm fs.FileMode, mtime time.Time, size int64, r io.Reader) {
	c.mkdirAll(path.Dir(name), 0o755)
	c.header(name, cpioReg|unixPerm(perm), 1, mtime, size, 0, 0)
	if c.err != nil {
		return
	}
	n, err := io.Copy(c.w, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("cpio: %s: read %d of %d bytes (changed while archived?)", name, n, size)
	}
	if err != nil {
		c.err = err
		return
	}
	c.pad(int(size % 4))
}

// bytesFile writes a regular file holding data.
func (c *cpioWriter) bytesFile(name string, perm fs.FileMode, data []byte) {
	c.file(name, perm, time.Unix(0, 0), int64(len(data)), bytes.NewReader(data))
}

// symlink writes name pointing at target.
func (c *cpioWriter) symlink(name, target string) {
	c.mkdirAll(path.Dir(name), 0o755)
	c.header(name, cpioLnk|0o777, 1, time.Unix(0, 0), int64(len(target)), 0, 0)
	c.w.WriteString(target)
	c.pad(len(target))
}

// device writes a character (or block) device node.
func (c *cpioWriter) device(name string, typ uint32, perm fs.FileMode, major, minor uint32) {
	c.mkdirAll(path.Dir(name), 0o755)
	c.header(name, typ|unixPerm(perm), 1, time.Unix(0, 0), 0, major, minor)
}

// hostFile copies the host file src (followed if a symlink) to name.
func (c *cpioWriter) hostFile(name, src string, perm fs.FileMode) {
	if c.err != nil {
		return
	}
	f, err := os.Open(src)
	if err != nil {
		c.err = err
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		c.err = err
		return
	}
	if perm == 0 {
		perm = st.Mode().Perm()
	}
	c.file(name, perm, st.ModTime(), st.Size(), f)
}

// tree copies the host directory src to dst with its modes, mtimes and
// symlinks; ownership becomes root's. Hard links become separate copies.
func (c *cpioWriter) tree(dst, src string) {
	if c.err != nil {
		return
	}
	c.err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			c.mkdirAll(path.Dir(name), 0o755)
			c.header(name, cpioDir|unixPerm(mode), 2, info.ModTime(), 0, 0, 0)
			c.dirs[name] = true
		case mode.IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			c.file(name, mode, info.ModTime(), info.Size(), f)
			f.Close()
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.symlink(name, target)
		case mode&fs.ModeNamedPipe != 0:
			c.header(name, cpioFIFO|unixPerm(mode), 1, info.ModTime(), 0, 0, 0)
		case mode&fs.ModeDevice != 0:
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok {
				return fmt.Errorf("%s: device without stat", p)
			}
			typ := uint32(cpioBlk)
			if mode&fs.ModeCharDevice != 0 {
				typ = cpioChr
			}
			c.device(name, typ, mode, uint32((st.Rdev>>8)&0xfff|(st.Rdev>>32)&^0xfff), uint32(st.Rdev&0xff|(st.Rdev>>12)&^0xff))
		default:
			// Sockets mean nothing in an archive.
		}
		return c.err
	})
}

// close writes the trailer and flushes.
// guestTests writes the test binaries under dir, each in dir/NAME (its
// binary NAME.test, its testdata, its -test.run pattern in run, which the
// guest's runner passes on), and dir/order, their names in the order they
// run. Both VMs' runners read this layout.
func (c *cpioWriter) guestTests(dir string, guests []guest) {
	var order strings.Builder
	for _, g := range guests {
		d := dir + "/" + g.name
		c.mkdirAll(d, 0o755)
		c.hostFile(d+"/"+g.name+".test", g.binary, 0o755)
		if g.testdata != "" {
			c.tree(d+"/testdata", g.testdata)
		}
		if g.run != "" {
			c.bytesFile(d+"/run", 0o644, []byte(g.run+"\n"))
		}
		fmt.Fprintln(&order, g.name)
	}
	c.bytesFile(dir+"/order", 0o644, []byte(order.String()))
}

func (c *cpioWriter) close() error {
	c.header("TRAILER!!!", 0, 1, time.Unix(0, 0), 0, 0, 0)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}

// unixPerm is the permission part of a Unix mode, setuid/setgid/sticky
// included.
func unixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// TestCpioWriter checks the newc layout the kernel expects: magic, 13 hex
// fields, NUL-terminated name and data each padded to four bytes, trailer.
func TestCpioWriter(t *testing.T) {
	var buf bytes.Buffer
	c := newCpioWriter(&buf)
	c.bytesFile("etc/x", 0o644, []byte("hello"))
	c.symlink("bin/sh", "busybox")
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		name string
		mode uint32
		data string
	}
	var got []entry
	b := buf.Bytes()
	for len(b) > 0 {
		if len(b) < 110 || string(b[:6]) != "070701" {
			t.Fatalf("bad header at %q", b[:min(len(b), 20)])
		}
		var f [13]uint32
		for i := range f {
			if _, err := fmt.Sscanf(string(b[6+8*i:14+8*i]), "%08X", &f[i]); err != nil {
				t.Fatal(err)
			}
		}
		nameLen, size := int(f[11]), int(f[6])
		name := string(b[110 : 110+nameLen-1])
		off := (110 + nameLen + 3) &^ 3
		data := string(b[off : off+size])
		got = append(got, entry{name, f[1], data})
		b = b[(off+size+3)&^3:]
		if name == "TRAILER!!!" {
			break
		}
	}
	if len(b) != 0 {
		t.Errorf("%d bytes after the trailer", len(b))
	}
	want := []entry{
		{"etc", cpioDir | 0o755, ""},
		{"etc/x", cpioReg | 0o644, "hello"},
		{"bin", cpioDir | 0o755, ""},
		{"bin/sh", cpioLnk | 0o777, "busybox"},
		{"TRAILER!!!", 0, ""},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("archive entries:\n got %v\nwant %v", got, want)
	}
}

// initramfs is what goes into the VM besides the kernel.
type initramfs struct {
	busybox string   // static busybox
	rljail  string   // static rljail
	rootfs  string   // Python rootfs directory
	initSh  string   // init.sh
	guests  []guest  // test binaries, run in this order
	conf    []byte   // /etc/rljail-vm.conf
	applets []string // busybox --list-full
	modules []string // kernel modules (.ko) init.sh loads, from lib/rljail-vm
}

// write builds the archive at out.
func (ir initramfs) write(out string) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	c := newCpioWriter(f)
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "run", "newroot", "home", "var"} {
		c.mkdirAll(d, 0o755)
	}
	c.mkdirAll("root", 0o700)
	c.mkdirAll("tmp", 0o777|fs.ModeSticky)
	// The kernel opens /dev/console for init's stdio before devtmpfs exists.
	c.device("dev/console", cpioChr, 0o600, 5, 1)
	c.hostFile("init", ir.initSh, 0o755)
	c.hostFile("bin/busybox", ir.busybox, 0o755)
	for _, a := range ir.applets {
		a = strings.TrimPrefix(a, "/")
		if a == "" || a == "bin/busybox" {
			continue
		}
		c.symlink(a, "/bin/busybox")
	}
	c.hostFile("bin/rljail", ir.rljail, 0o755)
	c.mkdirAll("lib/rljail-vm", 0o755)
	c.hostFile("lib/rljail-vm/run-guests.sh", filepath.Join(filepath.Dir(ir.initSh), "run-guests.sh"), 0o644)
	for _, m := range ir.modules {
		c.hostFile("lib/rljail-vm/"+filepath.Base(m), m, 0o644)
	}
	c.bytesFile("etc/rljail-vm.conf", 0o644, ir.conf)
	c.guestTests("tests", ir.guests)
	c.mkdirAll("rootfs", 0o755)
	c.tree("rootfs/python", ir.rootfs)
	if err := c.close(); err != nil {
		return fmt.Errorf("initramfs %s: %w", out, err)
	}
	return nil
}
