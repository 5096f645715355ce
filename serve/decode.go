package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/rljail/rljail/jail"
)

// decodeStrict reads r's body as one JSON value into v: an unknown field,
// a value of the wrong type, trailing data or a body over the limit is an
// error whose message names the field (status: 400, or 413 for size).
func decodeStrict(r *http.Request, v any) (int, error) {
	// A body of known length is read into a buffer of exactly that size
	// (the decoder's own would grow by doubling, to twice a large body).
	var body io.Reader = r.Body
	if n := r.ContentLength; n > 0 {
		buf := make([]byte, n)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return badJSON(err)
		}
		body = bytes.NewReader(buf)
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badJSON(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return badJSON(err)
		}
		return 400, errors.New("the body holds more than one JSON value")
	}
	return 0, nil
}

func badJSON(err error) (int, error) {
	var mbe *http.MaxBytesError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return 413, fmt.Errorf("the body is larger than the server's limit of %d bytes", mbe.Limit)
	case errors.Is(err, io.EOF):
		return 400, errors.New("the body is empty: send a JSON object")
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
		return 400, fmt.Errorf("the body is not JSON: %v", err)
	case errors.As(err, &typ):
		return 400, fmt.Errorf("field %s: a JSON %s cannot be %s", typ.Field, typ.Value, typ.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return 400, fmt.Errorf("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return 400, fmt.Errorf("the body is not the expected JSON: %v", err)
}

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
