package rootfs

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// builtManifest is a manifest as Build writes it.
func builtManifest(t testing.TB) []byte {
	m := Manifest{FormatVersion: 1, PythonVersion: "3.11.2", Python: "/usr/bin/python3.11", Source: "/usr/bin/python3.11",
		Files: 1381, SizeBytes: 48307847, TreeSHA256: strings.Repeat("f7", 32),
		Programs:    map[string]int64{"/usr/bin/python3.11": 6831736, "/usr/lib/x86_64-linux-gnu/libc.so.6": 1926232},
		FilesSHA256: strings.Repeat("0c", 32),
		Packages:    []Package{{Name: "python3-numpy", Version: "1:1.24.2-1", Source: "system"}, {Name: "python3-six", Version: "1.16.0-4", Source: "system"}}}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// decodeStrict is parseManifest's encoding/json decode.
func decodeStrict(data []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&m)
	return m, err
}

// TestParseManifestFast: what Build writes takes the fast path, and gives
// what encoding/json gives; JSON outside the subset is left to
// encoding/json.
func TestParseManifestFast(t *testing.T) {
	built := builtManifest(t)
	tests := []struct {
		name string
		data string
		fast bool
	}{
		{"as Build writes it", string(built), true},
		{"compact", `{"format_version":1,"python_version":"3.11.2","python":"/usr/bin/python3.11","files":1,"size_bytes":3,"tree_sha256":"` + strings.Repeat("ab", 32) + `"}`, true},
		{"empty programs", `{"programs":{}}`, true},
		{"empty packages", `{"packages":[]}`, true},
		{"a package", `{"packages":[{"name":"numpy","version":"1.24.2","source":"venv"}]}`, true},
		{"a package with a field twice", `{"packages":[{"name":"a","name":"b"}]}`, false},
		{"a package with an unknown field", `{"packages":[{"name":"a","arch":"amd64"}]}`, false},
		{"packages not an array", `{"packages":{}}`, false},
		{"negative", `{"files":-2}`, true},
		{"an escape", `{"python":"/usr/bin/py\u0074hon"}`, false},
		{"non-ASCII", `{"python":"/usr/bin/pythön"}`, false},
		{"a key twice", `{"files":1,"files":2}`, false},
		{"a program twice", `{"programs":{"/a":1,"/a":2}}`, false},
		{"a key in other case", `{"Files":1}`, false},
		{"an unknown key", `{"extra":1}`, false},
		{"a fraction", `{"files":1.0}`, false},
		{"an exponent", `{"files":1e3}`, false},
		{"a plus sign", `{"files":+1}`, false},
		{"a leading zero", `{"files":01}`, false},
		{"too large", `{"size_bytes":9223372036854775808}`, false},
		{"null", `{"python":null}`, false},
		{"a string for a number", `{"files":"1"}`, false},
		{"more after the object", `{"files":1} x`, false},
		{"whitespace after the object", "{\"files\":1}\n\t ", true},
		{"not an object", `[1]`, false},
		{"truncated", `{"files":1`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseManifestFast([]byte(tc.data))
			if ok != tc.fast {
				t.Fatalf("fast path took it: %v, want %v", ok, tc.fast)
			}
			if !ok {
				return
			}
			want, err := decodeStrict([]byte(tc.data))
			if err != nil {
				t.Fatalf("encoding/json refuses what the fast path took: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("fast path %+v, encoding/json %+v", got, want)
			}
		})
	}
}

// FuzzParseManifestFast: whatever the fast path takes, encoding/json takes
// too, and decodes to the same Manifest.
func FuzzParseManifestFast(f *testing.F) {
	f.Add(builtManifest(f))
	f.Add([]byte(`{"programs":{"/a":1,"/b":-0}}`))
	f.Add([]byte(`{"files":01}`))
	f.Add([]byte(`{"python":"a\"b"}`))
	f.Add([]byte(` { "files" : 7 , "source" : "" } `))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := parseManifestFast(data)
		if !ok {
			return
		}
		want, err := decodeStrict(data)
		if err != nil {
			t.Fatalf("%q: encoding/json refuses what the fast path took: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", data, got, want)
		}
	})
}
