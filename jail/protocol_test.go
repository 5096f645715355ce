package jail

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// decodeRecords reads a message as init.c does (read_message): the length
// of all records, then records of a tag, a length and NUL-separated fields,
// up to the end record.
func decodeRecords(t *testing.T, b []byte) (tags []byte, fields [][]string) {
	t.Helper()
	if len(b) < 4 || int(binary.LittleEndian.Uint32(b)) != len(b)-4 {
		t.Fatalf("the message's length prefix does not match its %d bytes", len(b))
	}
	at := b[4:]
	for {
		if len(at) < 5 {
			t.Fatalf("the message ends within a record")
		}
		tag, n := at[0], int(binary.LittleEndian.Uint32(at[1:5]))
		if tag == tagEnd {
			if n != 0 || len(at) != 5 {
				t.Fatalf("the end record has length %d and %d bytes follow it", n, len(at)-5)
			}
			return tags, fields
		}
		if n > len(at)-5 {
			t.Fatalf("a record of %d bytes in %d", n, len(at)-5)
		}
		tags = append(tags, tag)
		fields = append(fields, strings.Split(string(at[5:5+n]), "\x00"))
		at = at[5+n:]
	}
}

// TestEncode: the config and the limits are each one well-framed message,
// the limits carry only the limit records and the config none of them
// (init starts the payload on the limits: sendLimits).
func TestEncode(t *testing.T) {
	cfg := &initConfig{
		Command: []string{"python3", "-c", "pass"}, Env: []string{"A=b"}, Workdir: "/workspace", TmpSize: 1 << 20,
		Mounts:   []bindMount{{FD: 0, Dir: true, Source: "/src", Dest: "/workspace"}},
		Symlinks: []rootSymlink{{Name: "bin", Target: "usr/bin"}},
		Filter:   []byte{1, 2, 3}, Notify: true,
	}
	lim := &initLimits{Rlimits: []rlimit{{Resource: 4, Soft: 1, Hard: 1}}, UnshareCgroup: true, CgroupTasks: []int{0, 1}, Nice: 10}
	tests := []struct {
		name       string
		msg        []byte
		wantTags   []byte
		wantFields [][]string
	}{
		{"config", cfg.encode(),
			[]byte{tagArg, tagArg, tagArg, tagEnv, tagWorkdir, tagTmpSize, tagMount, tagSymlink, tagFilter, tagNotify},
			[][]string{{"python3"}, {"-c"}, {"pass"}, {"A=b"}, {"/workspace"}, {"1048576"}, {"0", "1", "/src", "/workspace"},
				{"bin", "usr/bin"}, {"\x01\x02\x03"}, {""}}},
		{"limits", lim.encode(),
			[]byte{tagRlimit, tagUnshareCgroup, tagCgroupTasks, tagCgroupTasks, tagNice},
			[][]string{{"4", "1", "1"}, {""}, {"0"}, {"1"}, {"10"}}},
		{"no limits", (&initLimits{}).encode(), nil, nil},
		{"channel", (&initConfig{Workdir: "/tmp", HasChannel: true, Channel: 2}).encode(),
			[]byte{tagWorkdir, tagTmpSize, tagChannel}, [][]string{{"/tmp"}, {"0"}, {"2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tags, fields := decodeRecords(t, tt.msg)
			if !reflect.DeepEqual(tags, tt.wantTags) || !reflect.DeepEqual(fields, tt.wantFields) {
				t.Errorf("records %v %q, want %v %q", tags, fields, tt.wantTags, tt.wantFields)
			}
		})
	}
}

// TestParseInitMessage holds parseInitMessage to encoding/json: the lines
// it reads itself must give what json.Unmarshal gives, and every other
// line must go to json.Unmarshal (a near miss of a routine line too).
func TestParseInitMessage(t *testing.T) {
	for _, line := range []string{
		`{"started":true}`,
		`{"exited":true,"code":0}`, `{"exited":true,"code":1}`, `{"exited":true,"code":255}`,
		`{"exited":true,"signal":9}`, `{"exited":true,"signal":31}`, `{"exited":true,"signal":64}`,
		// Near misses: encoding/json decides.
		`{"exited":true,"code":007}`, `{"exited":true,"code":-1}`, `{"exited":true,"code":256}`,
		`{"exited":true,"code":}`, `{"exited":true,"code":1 }`, `{"exited":true,"code":1}x`,
		`{"exited":true,"code":1,"signal":2}`, `{"exited":false,"code":3}`, `{"started":true }`,
		`{"exited":true,"signal":99999999999999999999}`,
		// The rest.
		`{"warning":"/usr is mounted as a plain bind: \"quoted\" \u00e9"}`,
		`{"error":"cannot run python4: No such file or directory","exit_code":127}`,
		`{"exited":true}`, `{}`, `not json`, ``,
	} {
		var want initMessage
		wantErr := json.Unmarshal([]byte(line), &want)
		got, err := parseInitMessage([]byte(line))
		if (err == nil) != (wantErr == nil) || got != want {
			t.Errorf("parseInitMessage(%q) = %+v, %v; encoding/json gives %+v, %v", line, got, err, want, wantErr)
		}
	}
}
