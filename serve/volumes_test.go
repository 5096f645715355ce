package serve

import (
	"fmt"
	"strings"
	"testing"
)

// volumeConfig is a configuration of a read-only volume "ro" and a
// writable one "rw", both below dir.
func volumeConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	c, err := ParseConfig([]byte(fmt.Sprintf("[volumes.ro]\nsource = %q\ntarget = \"/data/ro\"\n[volumes.rw]\nsource = %q\ntarget = \"/data/rw\"\nwritable = true\n", dir, dir)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseConfigVolumes(t *testing.T) {
	c := volumeConfig(t)
	if len(c.Volumes) != 2 || c.Volumes["ro"].Writable || !c.Volumes["rw"].Writable || c.Volumes["ro"].Target != "/data/ro" {
		t.Fatalf("parsed %+v", c.Volumes)
	}
	if got := c.WritableSources(); len(got) != 1 || got[0] != c.Volumes["rw"].Source {
		t.Errorf("WritableSources %v", got)
	}
	dir := t.TempDir()
	for _, bad := range []struct{ toml, want string }{
		{"[volumes.a]\nsource = \"relative\"\ntarget = \"/d\"", "must be an absolute"},
		{"[volumes.a]\nsource = \"/nonexistent/rljail-vol\"\ntarget = \"/d\"", "no such file"},
		{fmt.Sprintf("[volumes.a]\nsource = %q\n", dir), "needs a target"},
		{fmt.Sprintf("[volumes.a]\nsource = %q\ntarget = \"/tmp/x\"", dir), "below /tmp"},
		{fmt.Sprintf("[volumes.a]\nsource = %q\ntarget = \"/proc\"", dir), "below /proc"},
		{fmt.Sprintf("[volumes.a]\nsource = %q\ntarget = \"d\"", dir), "absolute"},
		{fmt.Sprintf("[volumes.a]\nsource = %q\ntarget = \"/d\"\nmode = \"rw\"", dir), "unknown key"},
		{fmt.Sprintf("[volumes.a]\nsource = \"%s/../x\"\ntarget = \"/d\"", dir), "clean"},
	} {
		_, err := ParseConfig([]byte(bad.toml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error saying %q", bad.toml, err, bad.want)
		}
	}
}

func TestRunVolumeRefusals(t *testing.T) {
	s := New(Options{Config: volumeConfig(t), Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent"}}})
	for _, c := range []struct {
		name string
		vols []VolumeRequest
		req  func(*RunRequest)
		want string
	}{
		{"unknown", []VolumeRequest{{Name: "nope"}}, nil, "volumes[0].name: \"nope\" is not a volume this server grants (it grants ro, rw)"},
		{"rw on ro", []VolumeRequest{{Name: "ro", RW: true}}, nil, "volumes[0].rw: volume \"ro\" is read-only"},
		{"twice", []VolumeRequest{{Name: "ro"}, {Name: "ro", Target: "/x"}}, nil, "volumes[1].name: volume \"ro\" is asked for twice"},
		{"relative", []VolumeRequest{{Name: "ro", Target: "data"}}, nil, "volumes[0].target: target \"data\" must be an absolute"},
		{"dotdot", []VolumeRequest{{Name: "ro", Target: "/data/../etc"}}, nil, "volumes[0].target: target \"/data/../etc\" must be an absolute, clean"},
		{"nul", []VolumeRequest{{Name: "ro", Target: "/d\x00"}}, nil, "volumes[0].target: target \"/d\\x00\" may not contain"},
		{"tmp", []VolumeRequest{{Name: "ro", Target: "/tmp"}}, nil, "volumes[0].target: target /tmp is on or below /tmp"},
		{"sys", []VolumeRequest{{Name: "ro", Target: "/sys/fs"}}, nil, "volumes[0].target: target /sys/fs is on or below /sys"},
		{"dev", []VolumeRequest{{Name: "ro", Target: "/dev/shm/x"}}, nil, "below /dev"},
		{"root", []VolumeRequest{{Name: "ro", Target: "/"}}, nil, "volumes[0].target: volume destination / would hide"},
		{"usr", []VolumeRequest{{Name: "ro", Target: "/usr"}}, nil, "volumes[0].target: volume destination /usr would hide"},
		{"over another", []VolumeRequest{{Name: "ro", Target: "/data"}, {Name: "rw"}}, nil, "volumes[1].target: /data/rw is on or below volumes[0]'s target /data"},
		{"put into ro", []VolumeRequest{{Name: "ro"}}, func(r *RunRequest) { r.Files = []RunFile{{Path: "/data/ro/x", Content: "x"}} }, "files[0].path: path \"/data/ro/x\" is outside the places this request may reach (/tmp, /dev/shm: /tmp, /dev/shm, or below a volume granted rw"},
		{"fetch outside", []VolumeRequest{{Name: "ro"}}, func(r *RunRequest) { r.FetchFiles = []string{"/data/other"} }, "fetch_files[0]: path \"/data/other\" is outside the places this request may reach (/tmp, /dev/shm, /data/ro: /tmp, /dev/shm, or below a granted volume"},
		{"volume top", []VolumeRequest{{Name: "rw"}}, func(r *RunRequest) { r.FetchFiles = []string{"/data/rw"} }, "fetch_files[0]: path \"/data/rw\" is outside"},
	} {
		req := &RunRequest{Command: []string{"true"}, Volumes: c.vols}
		if c.req != nil {
			c.req(req)
		}
		_, err := s.v1Job(req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if _, err := s.sessionConfig(&SessionRequest{Volumes: c.vols}); c.req == nil && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s (session): %v, want %q", c.name, err, c.want)
		}
	}
}

func TestRunVolumeGranted(t *testing.T) {
	cfg := volumeConfig(t)
	s := New(Options{Config: cfg, Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent"}}})
	j, err := s.v1Job(&RunRequest{Command: []string{"true"}, Volumes: []VolumeRequest{{Name: "ro"}, {Name: "rw", Target: "/out", RW: true}},
		Files: []RunFile{{Path: "/out/in.txt", Content: "x"}}, FetchFiles: []string{"/data/ro/a", "/out/b"}})
	if err != nil {
		t.Fatal(err)
	}
	spec := s.jobSpec(j)
	if len(spec.Volumes) != 2 || spec.Volumes[0].Dest != "/data/ro" || spec.Volumes[0].Writable || spec.Volumes[0].Source != cfg.Volumes["ro"].Source ||
		spec.Volumes[1].Dest != "/out" || !spec.Volumes[1].Writable {
		t.Errorf("volumes %+v", spec.Volumes)
	}
	if j.files[0].path != "/out/in.txt" || j.fetch[1] != "/out/b" {
		t.Errorf("files %+v fetch %v", j.files, j.fetch)
	}
	// A reload takes the volumes away for the requests from then on.
	if err := s.Reload(Config{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.v1Job(&RunRequest{Command: []string{"true"}, Volumes: []VolumeRequest{{Name: "ro"}}}); err == nil || !strings.Contains(err.Error(), "grants none") {
		t.Errorf("after the reload: %v", err)
	}
}
