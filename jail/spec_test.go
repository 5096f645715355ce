package jail

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseVolume(t *testing.T) {
	tests := []struct {
		in      string
		want    Volume
		wantErr string
	}{
		{in: "./data:/data", want: Volume{Source: "./data", Dest: "/data"}},
		{in: "/srv/x:/x:ro", want: Volume{Source: "/srv/x", Dest: "/x"}},
		{in: "/srv/x:/x:rw", want: Volume{Source: "/srv/x", Dest: "/x", Writable: true}},
		{in: "/srv/x", wantErr: "is not SRC:DST"},
		{in: "/a:/b:rw:extra", wantErr: "is not SRC:DST"},
		{in: "/a:/b:rx", wantErr: "neither ro nor rw"},
		{in: ":/b", wantErr: "empty source"},
		{in: "/a:", wantErr: "empty destination"},
		{in: "/a:b", wantErr: "must be an absolute path"},
		{in: "/a:/b/../c", wantErr: "must be a clean path"},
		{in: "/a:/b/", wantErr: "must be a clean path"},
		{in: "/a:/", wantErr: "would hide"},
		{in: "/a:/proc", wantErr: "reserved"},
		{in: "/a:/proc/sys", wantErr: "reserved"},
		{in: "/a:/dev/shm", wantErr: "reserved"},
		{in: "/a:/devices", want: Volume{Source: "/a", Dest: "/devices"}},
		{in: "/a:/usr", wantErr: "would hide the root filesystem's /usr"},
		{in: "/a:/etc", wantErr: "would hide the jail's generated /etc"},
		{in: "/a:/lib64", wantErr: "would hide"},
		{in: "/a:/usr/lib/extra", want: Volume{Source: "/a", Dest: "/usr/lib/extra"}},
		{in: "/a:/etc/app.conf", want: Volume{Source: "/a", Dest: "/etc/app.conf"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseVolume(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseVolume(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseVolume(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseVolume(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	ok := func() Spec { return Spec{Command: []string{"python3"}, Rootfs: dir} }
	tests := []struct {
		name    string
		mutate  func(*Spec)
		wantErr string
		check   func(*testing.T, Spec)
	}{
		{name: "minimal", mutate: func(*Spec) {}},
		{name: "no command", mutate: func(s *Spec) { s.Command = nil }, wantErr: "no command"},
		{name: "empty command", mutate: func(s *Spec) { s.Command = []string{""} }, wantErr: "no command"},
		{name: "NUL in argument", mutate: func(s *Spec) { s.Command = []string{"a", "b\x00c"} }, wantErr: "NUL"},
		{name: "negative timeout", mutate: func(s *Spec) { s.Timeout = -time.Second }, wantErr: "negative"},
		{name: "no rootfs", mutate: func(s *Spec) { s.Rootfs = "" }, wantErr: "no rootfs"},
		{name: "missing rootfs", mutate: func(s *Spec) { s.Rootfs = filepath.Join(dir, "nope") }, wantErr: "no such file"},
		{name: "rootfs is a file", mutate: func(s *Spec) { s.Rootfs = file }, wantErr: "not a directory"},
		{name: "bad env", mutate: func(s *Spec) { s.Env = []string{"NOEQUALS"} }, wantErr: "not KEY=VALUE"},
		{name: "relative workdir", mutate: func(s *Spec) { s.Workdir = "tmp" }, wantErr: "absolute"},
		{name: "pids limit 1", mutate: func(s *Spec) { s.Resources.PidsMax = 1 }, wantErr: "init counts too"},
		{name: "pids limit beyond the kernel's", mutate: func(s *Spec) { s.Resources.PidsMax = 99999999999 }, wantErr: "more than the kernel allows"},
		{name: "more CPUs than the host", mutate: func(s *Spec) { s.Resources.CPUs = float64(onlineCPUs() + 1) }, wantErr: "CPUs of this host"},
		{name: "missing volume source", mutate: func(s *Spec) {
			s.Volumes = []Volume{{Source: filepath.Join(dir, "nope"), Dest: "/x"}}
		}, wantErr: "no such file"},
		{name: "duplicate destination", mutate: func(s *Spec) {
			s.Volumes = []Volume{{Source: dir, Dest: "/x"}, {Source: file, Dest: "/x"}}
		}, wantErr: "used twice"},
		{name: "volume over workspace", mutate: func(s *Spec) {
			s.Workspace = dir
			s.Volumes = []Volume{{Source: dir, Dest: WorkspaceDir}}
		}, wantErr: "add --no-workspace"},
		{name: "volume source through a symlink refused", mutate: func(s *Spec) {
			s.Volumes = []Volume{{Source: link, Dest: "/x"}}
		}, wantErr: "is a symlink"},
		{name: "volume source below a symlink refused", mutate: func(s *Spec) {
			s.Volumes = []Volume{{Source: filepath.Join(link, "file"), Dest: "/x"}}
		}, wantErr: "is a symlink"},
		{name: "volume source made absolute and clean", mutate: func(s *Spec) {
			s.Volumes = []Volume{{Source: dir + "/./sub/..", Dest: "/x"}}
		}, check: func(t *testing.T, s Spec) {
			if s.Volumes[0].Source != filepath.Clean(dir) {
				t.Fatalf("volume source = %q, want %q", s.Volumes[0].Source, filepath.Clean(dir))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok()
			tt.mutate(&s)
			err := s.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate(): %v", err)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

func TestPayloadEnv(t *testing.T) {
	got := payloadEnv([]string{"OMP_NUM_THREADS=1"}, []string{"FOO=bar", "HOME=/x", "PATH=/opt/bin"})
	want := []string{"PATH=/opt/bin", "HOME=/x", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1", "FOO=bar"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("payloadEnv = %q, want %q", got, want)
	}
}

func TestThreadHints(t *testing.T) {
	all := func(n string) []string {
		var out []string
		for _, k := range threadPoolVars() {
			out = append(out, k+"="+n)
		}
		return out
	}
	tests := []struct {
		name   string
		cpus   float64
		usable int
		extra  []string
		want   []string
		n      int
	}{
		{"one of two", 1, 2, nil, all("1"), 1},
		{"a fraction rounds up", 1.5, 4, []string{"FOO=1"}, all("2"), 2},
		{"a small share is still one", 0.1, 2, nil, all("1"), 1},
		{"every usable CPU: no hint", 2, 2, nil, nil, 0},
		{"more than usable: no hint", 3, 2, nil, nil, 0},
		{"the caller set one: no hint", 1, 8, []string{"OPENBLAS_NUM_THREADS=4"}, nil, 0},
		{"the caller emptied one: no hint", 1, 8, []string{"OMP_NUM_THREADS="}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n := threadHints(tt.cpus, tt.usable, tt.extra)
			if !reflect.DeepEqual(got, tt.want) || n != tt.n {
				t.Fatalf("threadHints(%g, %d, %q) = %q, %d; want %q, %d", tt.cpus, tt.usable, tt.extra, got, n, tt.want, tt.n)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	s := Spec{}.withDefaults()
	if s.Timeout != DefaultTimeout || s.TmpSize != DefaultTmpSize || s.Workdir != "/tmp" {
		t.Fatalf("defaults without workspace = %v %v %q", s.Timeout, s.TmpSize, s.Workdir)
	}
	s = Spec{Workspace: "/x"}.withDefaults()
	if s.Workdir != WorkspaceDir {
		t.Fatalf("workdir with a workspace = %q, want %q", s.Workdir, WorkspaceDir)
	}
}
