package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDockerDispatch: the docker name and `rljail docker` reach the docker
// front end, whose refusals are one line and exit 125 before any run; a
// plain rljail command line does not.
func TestDockerDispatch(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // start of stderr, or of stdout when code is 0
	}{
		{[]string{"/usr/local/bin/docker", "ps"}, 125, "rljail docker: `docker ps` is not supported: "},
		{[]string{"docker"}, 125, "rljail docker: no command given: "},
		{[]string{"rljail", "docker", "images"}, 125, "rljail docker: `docker images` is not supported: "},
		{[]string{"docker", "run", "--privileged", "sandbox-image", "true"}, 125, "rljail docker: --privileged is not supported: "},
		{[]string{"rljail", "docker", "container", "run", "--network=host", "sandbox-image", "true"}, 125, "rljail docker: --network host is not supported: "},
		{[]string{"docker", "run", "--rljail-images", "/nonexistent/images.toml", "x", "true"}, 125, "rljail docker: the image mapping file /nonexistent/images.toml: "},
		{[]string{"docker", "version"}, 0, "rljail dev standing in for `docker run` only"},
		{[]string{"docker", "run", "--help"}, 0, "Usage:  docker run [OPTIONS] IMAGE COMMAND [ARG...]"},
		{[]string{"rljail", "--bogus"}, 125, "rljail: flag provided but not defined: --bogus"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &stdout, &stderr)
		got := stderr.String()
		if tc.code == 0 {
			got = stdout.String()
		}
		if code != tc.code || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
		if code == 125 && strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%q: stderr is not one line: %q", tc.args, stderr.String())
		}
	}
}

// TestDockerImagesFile: the mapping file is read through the Guard: not
// from a volume the run grants rw, nor one anybody may write.
func TestDockerImagesFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "images.toml")
	if err := os.WriteFile(file, []byte(`"my:img" = "/nonexistent/rootfs"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"docker", "run", "-v", dir + ":/w", "--rljail-images", file, "my:img", "true"}, "rljail docker: the image mapping file " + file + " is inside the volume "},
		{[]string{"docker", "run", "--rljail-images", file, "other:img", "true"}, "rljail docker: image other:img is not mapped to a root filesystem"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, strings.NewReader(""), &stdout, &stderr); code != 125 || !strings.HasPrefix(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 125 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"docker", "run", "--rljail-images", file, "my:img", "true"}, strings.NewReader(""), &stdout, &stderr); code != 125 || !strings.Contains(stderr.String(), "may be written by anybody") {
		t.Errorf("a mapping file anybody may write: exit %d, stderr %q", code, stderr.String())
	}
}
