package rootfs

import "strconv"

// parseManifestFast decodes a manifest as Build writes it, without
// encoding/json, whose reflection costs about 0.1 ms in a fresh process
// (Check runs before every jail). It takes one JSON object of the
// Manifest's keys, spelled exactly, each at most once; strings of
// printable ASCII without escapes; integers without fraction or exponent
// that fit in 64 bits; and "programs" as an object of such strings and
// integers. For anything else it reports false, and parseManifest decodes
// with encoding/json, whose answer is the authority: whenever this one
// reports true, encoding/json gives the same Manifest (FuzzParseManifestFast).
func parseManifestFast(data []byte) (Manifest, bool) {
	p := fastParser{data: data}
	var m Manifest
	seen := map[string]bool{}
	ok := p.object(func(key string) bool {
		if seen[key] {
			return false
		}
		seen[key] = true
		switch key {
		case "format_version":
			n, ok := p.integer()
			m.FormatVersion = int(n)
			return ok
		case "files":
			n, ok := p.integer()
			m.Files = int(n)
			return ok
		case "size_bytes":
			var ok bool
			m.SizeBytes, ok = p.integer()
			return ok
		case "python_version":
			return p.stringInto(&m.PythonVersion)
		case "python":
			return p.stringInto(&m.Python)
		case "source":
			return p.stringInto(&m.Source)
		case "tree_sha256":
			return p.stringInto(&m.TreeSHA256)
		case "files_sha256":
			return p.stringInto(&m.FilesSHA256)
		case "packages":
			m.Packages = []Package{} // as encoding/json gives for []
			return p.array(func() bool {
				var pkg Package
				seenField := map[string]bool{}
				ok := p.object(func(field string) bool {
					if seenField[field] {
						return false
					}
					seenField[field] = true
					switch field {
					case "name":
						return p.stringInto(&pkg.Name)
					case "version":
						return p.stringInto(&pkg.Version)
					case "source":
						return p.stringInto(&pkg.Source)
					}
					return false
				})
				m.Packages = append(m.Packages, pkg)
				return ok
			})
		case "programs":
			m.Programs = map[string]int64{}
			return p.object(func(path string) bool {
				if _, dup := m.Programs[path]; dup {
					return false
				}
				n, ok := p.integer()
				m.Programs[path] = n
				return ok
			})
		}
		return false
	})
	p.space()
	return m, ok && p.i == len(p.data)
}

// fastParser reads the subset of JSON that parseManifestFast takes.
type fastParser struct {
	data []byte
	i    int
}

func (p *fastParser) space() {
	for p.i < len(p.data) && (p.data[p.i] == ' ' || p.data[p.i] == '\t' || p.data[p.i] == '\n' || p.data[p.i] == '\r') {
		p.i++
	}
}

func (p *fastParser) byte(c byte) bool {
	p.space()
	if p.i < len(p.data) && p.data[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}; member reads each value after its key
// and colon.
func (p *fastParser) object(member func(key string) bool) bool {
	if !p.byte('{') {
		return false
	}
	if p.byte('}') {
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.byte(':') || !member(key) {
			return false
		}
		if p.byte('}') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

// array reads [value, ...]; element reads each value.
func (p *fastParser) array(element func() bool) bool {
	if !p.byte('[') {
		return false
	}
	if p.byte(']') {
		return true
	}
	for {
		if !element() {
			return false
		}
		if p.byte(']') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

// str reads a string of printable ASCII without escapes.
func (p *fastParser) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			s := string(p.data[start:p.i])
			p.i++
			return s, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
		p.i++
	}
	return "", false
}

func (p *fastParser) stringInto(dst *string) bool {
	s, ok := p.str()
	*dst = s
	return ok
}

// integer reads -?(0|[1-9][0-9]*) within int64.
func (p *fastParser) integer() (int64, bool) {
	p.space()
	start := p.i
	if p.i < len(p.data) && p.data[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
		p.i++
	}
	switch {
	case p.i == digits, p.data[digits] == '0' && p.i > digits+1:
		return 0, false
	case p.i < len(p.data) && (p.data[p.i] == '.' || p.data[p.i] == 'e' || p.data[p.i] == 'E'):
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.data[start:p.i]), 10, 64)
	return n, err == nil
}
