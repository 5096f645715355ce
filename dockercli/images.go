package dockercli

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2"
)

// DefaultRootfs is the name of rljail's default root filesystem (the
// Python rootfs that `rljail rootfs build` makes).
const DefaultRootfs = "python"

// SandboxImage is the placeholder image name of the sandbox rule's own
// examples (`docker run ... sandbox-image timeout 10 python ...`): it
// names no real image, so mapping it to the default rootfs claims nothing
// about a version.
const SandboxImage = "sandbox-image"

// MappingFile is one images.toml: image name = rootfs name or directory.
type MappingFile struct {
	Path string
	Map  map[string]string
}

// ParseMapping reads an images.toml: top-level keys are image names
// (quoted, as TOML wants a key with a colon: "python:3.11-slim" =
// "python"), values are the name of a root filesystem or an absolute
// path to one. Anything else is an error naming the key.
func ParseMapping(data []byte, path string) (MappingFile, error) {
	var raw map[string]any
	if err := toml.NewDecoder(bytes.NewReader(data)).Decode(&raw); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return MappingFile{}, fmt.Errorf("%s:%d:%d: %s", path, row, col, de.Error())
		}
		return MappingFile{}, fmt.Errorf("%s: %w", path, err)
	}
	m := MappingFile{Path: path, Map: map[string]string{}}
	for k, v := range raw {
		s, ok := v.(string)
		if !ok {
			return MappingFile{}, fmt.Errorf("%s: %q: the value is a %T, not a root filesystem's name or directory (\"python\", \"/srv/rootfs/py\")", path, k, v)
		}
		if !filepath.IsAbs(s) && !rootfsName().MatchString(s) {
			return MappingFile{}, fmt.Errorf("%s: %q = %q: not a root filesystem's name (letters, digits, . _ -) or an absolute directory", path, k, s)
		}
		m.Map[k] = s
	}
	return m, nil
}

// rootfsName is a name of a root filesystem: a directory beside the
// default one.
var rootfsName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`) })

// Images maps an image to a root filesystem.
type Images struct {
	// Files are the mapping files read, the first winning.
	Files []MappingFile
	// DefaultDir is where the default root filesystem is (rljail's
	// default place, or $RLJAIL_ROOTFS); the others, by name, are beside it.
	DefaultDir string
	// DefaultPython is the default root filesystem's Python version
	// (3.11.2), "" when it is not built yet.
	DefaultPython string
	// IsRootfs says whether dir holds a root filesystem.
	IsRootfs func(dir string) bool
	// UserFile is where the user's mapping file would be, for the hint.
	UserFile string
}

// Target is the root filesystem an image runs on.
type Target struct {
	// Dir is the root filesystem's directory; "" for the default one
	// (which rljail then builds on first use, as for its own runs).
	Dir string
	// By says which rule mapped it, for --rljail-verbose and tests.
	By string
}

// pythonTag is the tag of the official python images that name a version
// and no other distribution than Debian's slim or full one.
var pythonTag = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(3\.[0-9]+)(\.[0-9]+)?(-slim)?$`) })

// Resolve maps image, in this order: the mapping files; a root filesystem
// of that name; the built-in names (sandbox-image, and python:3.N[.M]
// [-slim] when the default root filesystem's Python is that version).
// Anything else is an error that says how to map it.
func (im *Images) Resolve(image string) (Target, error) {
	short := shortName(image)
	for _, f := range im.Files {
		for _, key := range []string{image, short} {
			if v, ok := f.Map[key]; ok {
				return im.target(image, v, "mapped by "+f.Path)
			}
		}
	}
	if rootfsName().MatchString(short) {
		if short == DefaultRootfs {
			return Target{By: "the default root filesystem"}, nil
		}
		if dir := filepath.Join(filepath.Dir(im.DefaultDir), short); im.IsRootfs != nil && im.IsRootfs(dir) {
			return Target{Dir: dir, By: "the root filesystem of that name"}, nil
		}
	}
	if short == SandboxImage {
		return Target{By: "built in: the sandbox rule's placeholder"}, nil
	}
	repo, tag, _ := strings.Cut(short, ":")
	if repo == "python" {
		if m := pythonTag().FindStringSubmatch(tag); m != nil {
			want := m[1] + m[2]
			if im.DefaultPython == "" || im.DefaultPython == want || (m[2] == "" && strings.HasPrefix(im.DefaultPython, want+".")) {
				return Target{By: "built in: the default root filesystem's Python is " + want}, nil
			}
		}
		if im.DefaultPython != "" {
			return Target{}, &Error{Msg: fmt.Sprintf("image %s is not mapped: rljail's Python root filesystem is CPython %s, which that image is not; if it will do, map it in %s (%q = %q), or build one from that Python (rljail rootfs build --python PYTHON --rootfs DIR) and map the image to DIR",
				image, im.DefaultPython, im.UserFile, short, DefaultRootfs)}
		}
	}
	return Target{}, &Error{Msg: fmt.Sprintf("image %s is not mapped to a root filesystem: rljail runs no images, only its own root filesystems; map it in %s (%q = %q), /etc/rljail/images.toml or --rljail-images FILE",
		image, im.UserFile, short, DefaultRootfs)}
}

// target is the root filesystem that a mapping's value v names.
func (im *Images) target(image, v, by string) (Target, error) {
	if filepath.IsAbs(v) {
		return Target{Dir: filepath.Clean(v), By: by}, nil
	}
	if v == DefaultRootfs {
		return Target{By: by}, nil
	}
	dir := filepath.Join(filepath.Dir(im.DefaultDir), v)
	if im.IsRootfs == nil || !im.IsRootfs(dir) {
		return Target{}, &Error{Msg: fmt.Sprintf("image %s is %s to the root filesystem %s, which is not built at %s: build it (rljail rootfs build --rootfs %s)", image, by, v, dir, dir)}
	}
	return Target{Dir: dir, By: by}, nil
}

// shortName is image without docker's default registry and library
// prefixes: docker.io/library/python:3.11 is python:3.11.
func shortName(image string) string {
	for _, p := range []string{"index.docker.io/library/", "docker.io/library/", "index.docker.io/", "docker.io/", "library/"} {
		if strings.HasPrefix(image, p) {
			return image[len(p):]
		}
	}
	return image
}
