package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"reflect"
	"strings"

	"github.com/rljail/rljail/jail"
)

// maxJSONValues bounds the JSON values (array elements, object members)
// of a request's body that decodes into typed fields. A small value
// decodes into many times its bytes (an empty string of 3 bytes, `,""`,
// into a 16-byte string and its share of a slice that grows by doubling;
// a short env entry into a map entry of about 100): a 60 MiB body of
// them took the server from 70 MiB to 1.1 GiB, whatever body_budget held
// it to as sent. No request needs more: a payload's argv and environment
// together fit the kernel's 2 MiB (ARG_MAX), files and fetch_files are
// at most 1000 each.
const maxJSONValues = 1 << 18

// decodeStrict reads r's body as one JSON value into v: an unknown field,
// a value of the wrong type, trailing data, more than maxJSONValues
// values or a body over the limit is an error whose message names the
// field or the bound (status: 400, or 413 for size).
func decodeStrict(r *http.Request, v any) (int, error) {
	// A body of known length is read into a buffer of exactly that size
	// (the decoder's own would grow by doubling, to twice a large body);
	// one of unknown length, as it comes, within max_body.
	var buf []byte
	if n := r.ContentLength; n > 0 {
		buf = make([]byte, n)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return badJSON(err)
		}
	} else {
		var err error
		if buf, err = io.ReadAll(r.Body); err != nil {
			return badJSON(err)
		}
	}
	if countsValues(v) && jsonValuesOver(buf, maxJSONValues) {
		return 400, fmt.Errorf("the body holds more than %d JSON values (array elements and object members): no request needs so many", maxJSONValues)
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badJSON(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return 400, errors.New("the body holds more than one JSON value")
	}
	return 0, nil
}

// countsValues says whether v's body is held to maxJSONValues: not a
// session's set or load_context, whose value is kept as the raw JSON it
// was sent as (json.RawMessage: its bytes, once), however many values it
// holds.
func countsValues(v any) bool {
	switch v.(type) {
	case *SessionSetRequest, *SessionLoadContextRequest:
		return false
	}
	return true
}

// jsonValuesOver says whether b, read as JSON, holds more than max values
// in its arrays and objects: it counts the commas and the openings of
// arrays and objects outside strings (a value each, or more), without
// decoding. What is not JSON at all is left for the decoder to refuse.
func jsonValuesOver(b []byte, max int) bool {
	n := 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ',' || c == '[' || c == '{':
			n++
			if n > max {
				return true
			}
		}
	}
	return false
}

func badJSON(err error) (int, error) {
	var mbe *http.MaxBytesError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return 413, fmt.Errorf("the body is larger than the server's limit of %d bytes", mbe.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 408, fmt.Errorf("the body came too slowly: the server takes a body at %d bytes a second at least, after its first %v, and whole within %v", bodyRate, bodyGrace, RequestReadTimeout)
	case errors.Is(err, io.EOF):
		return 400, errors.New("the body is empty: send a JSON object")
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
		return 400, fmt.Errorf("the body is not JSON: %v", err)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return 400, fmt.Errorf("the body must be a JSON object, not %s", jsonKind(typ.Value))
		}
		return 400, fmt.Errorf("field %s must be %s, not %s", typ.Field, goKind(typ.Type), jsonKind(typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return 400, fmt.Errorf("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return 400, fmt.Errorf("the body is not the expected JSON: %v", err)
}

// jsonKind names what the decoder found ("array", "number 1e400") for
// the client: "an array", "the number 1e400".
func jsonKind(v string) string {
	switch {
	case v == "array", v == "object":
		return "an " + v
	case v == "bool":
		return "true or false"
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	}
	return "a " + v
}

// goKind names the JSON a field of type t takes, as a client reads it
// (not Go's []serve.RunFile or map[string]*string).
func goKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("an integer of %d bits", t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a non-negative integer of %d bits", t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array of " + plural(t.Elem())
	case reflect.Map:
		return "an object of " + plural(t.Elem())
	case reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}

// plural names the values of type t, for goKind's arrays and objects.
func plural(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "strings"
	case reflect.Bool:
		return "booleans"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integers"
	case reflect.Float32, reflect.Float64:
		return "numbers"
	case reflect.Slice, reflect.Array:
		return "arrays"
	}
	return "objects"
}

// maxPathLen is the longest path a request may name: the kernel's
// PATH_MAX less its NUL. A longer one could never be opened, and one in
// fetch_files made the launcher's answer longer than the server takes
// (maxFetchPath): the launcher, unread, then blocked until the timeout.
const maxPathLen = 4095

// jailPath turns a request's file path into the jail's: a relative one
// is below the working directory (/tmp), an absolute one must be below
// /tmp or /dev/shm, the jail's writable places; no "..", no NUL.
func jailPath(field, p string) (string, error) {
	return jailPathIn(field, p, nil, false)
}

// jailPathIn is jailPath for a request granted vols: a path below a
// volume's target is allowed too, to take out (fetch) below any of them,
// to put in below one granted rw.
func jailPathIn(field, p string, vols []jail.Volume, fetch bool) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%s: a path must be a non-empty string without NUL", field)
	}
	if len(p) > maxPathLen {
		return "", fmt.Errorf("%s: a path of %d bytes is longer than the %d a path in the jail may be", field, len(p), maxPathLen)
	}
	abs := p
	if !path.IsAbs(p) {
		abs = "/tmp/" + p
	}
	clean := path.Clean(abs)
	if clean != strings.TrimSuffix(abs, "/") || strings.Contains(p, "..") {
		return "", fmt.Errorf("%s: path %q must be clean (no .., no //)", field, p)
	}
	places := []string{"/tmp", "/dev/shm"}
	for _, v := range vols {
		if fetch || v.Writable {
			places = append(places, v.Dest)
		}
	}
	for _, place := range places {
		if strings.HasPrefix(clean, place+"/") {
			return clean, nil
		}
	}
	if len(vols) == 0 {
		return "", fmt.Errorf("%s: path %q is outside the jail's writable places (/tmp, /dev/shm; a relative path is below /tmp)", field, p)
	}
	what := "below a volume granted rw"
	if fetch {
		what = "below a granted volume"
	}
	return "", fmt.Errorf("%s: path %q is outside the places this request may reach (%s: /tmp, /dev/shm, or %s; a relative path is below /tmp)", field, p, strings.Join(places, ", "), what)
}
