package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"
)

// ProtocolVersion is the version of the runner's protocol
// (docs/session-protocol.md); hello reports it.
const ProtocolVersion = 2

// Error types of the protocol: the "type" of a reply's error that the
// supervisor itself decides. An exception in a cell has its Python type.
const (
	ErrBadRequest      = "BadRequest"      // not JSON, not an object, no id, not UTF-8, a bad field
	ErrRequestTooLarge = "RequestTooLarge" // a line longer than the request cap
	ErrUnknownOp       = "UnknownOp"
	ErrBusy            = "Busy"        // a request for the worker while the queue is full
	ErrCellTimeout     = "CellTimeout" // the cell overran --cell-timeout and was interrupted
	ErrCellLimit       = "CellLimit"   // --max-cells cells have run
	ErrSessionLost     = "SessionLost" // the jail is gone, and the namespace with it
	ErrBadPath         = "BadPath"     // put_file/get_file outside the jail's writable places
	ErrFileTooLarge    = "FileTooLarge"
	ErrWorker          = "WorkerError" // the worker's reply was not what the request asks
	ErrUnknownCall     = "UnknownCall" // a call_result for no call waiting: answered, timed out or never made
)

// Request is one line from the runner.
type Request struct {
	ID json.RawMessage `json:"id"`
	Op string          `json:"op"`
	// exec
	Code string `json:"code"`
	// set, get
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
	// load_context, put_file, get_file
	Path string `json:"path"`
	// put_file: base64
	Data string `json:"data"`
	// call_result: the call's number (an event's "call"), and value or
	// error (the runner's handler failed).
	Call  *int64  `json:"call"`
	Error *string `json:"error"`
	// close: at once, not behind the queued requests (they are answered
	// SessionLost).
	Now bool `json:"now"`
}

// Origins of a reply's error: the supervisor's own verdict, or what the
// worker reported of the cell's code (its exception: the cell can make it
// say anything, type included).
const (
	OriginRljail = "rljail"
	OriginCell   = "cell"
)

// MaxRepr caps get's repr of a value that is not JSON.
const MaxRepr = 64 << 10

// ValueResult is an exec's result: the repr of the cell's last
// expression's value when it is not None, as a REPL shows it (Jupyter's
// execute_result), at most MaxRepr bytes (Truncated says when cut). The
// worker's claim, as a cell's error is.
type ValueResult struct {
	Repr      string `json:"repr"`
	Truncated bool   `json:"truncated"`
}

// ErrorInfo is a reply's error.
type ErrorInfo struct {
	Type string `json:"type"`
	// Origin is OriginRljail or OriginCell: a runner decides by it, never
	// by a type name a cell can choose.
	Origin    string `json:"origin"`
	Message   string `json:"message,omitempty"`
	Traceback string `json:"traceback,omitempty"`
	// Reason says why a session was lost (SessionLost).
	Reason string `json:"reason,omitempty"`
}

// protocolError is a request refused by the supervisor.
type protocolError struct {
	typ, msg string
}

func (e *protocolError) Error() string { return e.typ + ": " + e.msg }

func refuse(typ, format string, a ...any) *protocolError {
	return &protocolError{typ, fmt.Sprintf(format, a...)}
}

// nullID is the id of a reply to a request whose id could not be read.
var nullID = json.RawMessage("null")

// parseRequest decodes one line. The id is returned whenever it could be
// read, so that even a refused request's error names it.
func parseRequest(line []byte) (Request, *protocolError) {
	var req Request
	if !utf8.Valid(line) {
		// encoding/json would replace the bad bytes silently; a request
		// that is not text is refused instead.
		return req, refuse(ErrBadRequest, "the request is not valid UTF-8")
	}
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return req, refuse(ErrBadRequest, "the request is not a JSON object")
	}
	if err := json.Unmarshal(trimmed, &req); err != nil {
		// The id, if the object has one that reads.
		var idOnly struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(trimmed, &idOnly) == nil {
			req.ID = idOnly.ID
		}
		return req, refuse(ErrBadRequest, "the request is not valid JSON: %s", err)
	}
	if (len(req.ID) == 0 || string(req.ID) == "null") && req.Op == "call_result" {
		return req, nil // a call_result's id is optional: without one, no reply
	}
	if len(req.ID) == 0 || string(req.ID) == "null" {
		return req, refuse(ErrBadRequest, "the request has no id")
	}
	if c := req.ID[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
		return req, refuse(ErrBadRequest, "the id must be a string or a number")
	}
	return req, nil
}

// checkName refuses a variable name that is not a Python identifier (an
// ASCII one: the worker binds it with a dict assignment).
func checkName(name string) *protocolError {
	if name == "" || len(name) > 255 {
		return refuse(ErrBadRequest, "name %q is not an identifier", name)
	}
	for i, r := range name {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return refuse(ErrBadRequest, "name %q is not an identifier", name)
		}
	}
	return nil
}

// checkJailPath refuses a path that is not absolute and clean, or that is
// outside places, the jail's writable places.
func checkJailPath(p string, places []string) *protocolError {
	return checkPlace(p, places, "the jail's writable places")
}

// checkPlace refuses a path that is not absolute and clean, or that is
// below none of places (what names them in the refusal).
func checkPlace(p string, places []string, what string) *protocolError {
	if !cleanAbs(p) {
		return refuse(ErrBadPath, "path %q must be an absolute, clean path inside the jail", p)
	}
	if deepest(p, places) == "" {
		return refuse(ErrBadPath, "path %s is outside %s (%s)", p, what, strings.Join(places, ", "))
	}
	return nil
}

func cleanAbs(p string) bool {
	return p != "" && strings.IndexByte(p, 0) < 0 && path.IsAbs(p) && path.Clean(p) == p
}

// checkPutPath is put_file's check: below a writable place, and not in a
// read-only volume (the deepest place p is below decides, so a read-only
// volume inside a writable one is refused too).
func checkPutPath(p string, fp filePlaces) *protocolError {
	if ro := deepest(p, fp.Read); cleanAbs(p) && ro != "" && len(ro) > len(deepest(p, fp.Write)) {
		return refuse(ErrBadPath, "path %s is in the read-only volume %s: put_file writes below %s only", p, ro, strings.Join(fp.Write, ", "))
	}
	return checkJailPath(p, fp.Write)
}

// checkGetPath is get_file's check: below a writable place or a
// read-only volume.
func checkGetPath(p string, fp filePlaces) *protocolError {
	return checkPlace(p, append(append([]string(nil), fp.Write...), fp.Read...), "the places get_file reads")
}

// deepest is the longest of places that p is below, or "".
func deepest(p string, places []string) string {
	best := ""
	for _, pl := range places {
		if strings.HasPrefix(p, pl+"/") && len(pl) > len(best) {
			best = pl
		}
	}
	return best
}

// lineReader reads lines of at most max bytes; a longer line is read to
// its end and dropped (errLineTooLong), so the stream stays in step
// without holding more than max bytes. With reuse, every line is built in
// one buffer that the next call overwrites: the reader of the worker's
// channel, whose lines the jail writes as fast as it likes, holds one
// line's worth of memory at a time, not one allocation per line for the
// collector to catch up with.
type lineReader struct {
	r     *bufio.Reader
	max   int
	reuse bool
	buf   []byte
}

var errLineTooLong = errors.New("line too long")

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its newline. At EOF a last line
// without a newline is returned first. With reuse, the line is valid
// until the next call.
func (l *lineReader) next() ([]byte, error) {
	var line []byte
	if l.reuse {
		line = l.buf[:0]
	}
	defer func() {
		if l.reuse && cap(line) > cap(l.buf) {
			l.buf = line[:0]
		}
	}()
	tooLong := false
	for {
		chunk, err := l.r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > l.max+1 {
				tooLong, line = true, line[:0]
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil && (tooLong || len(line) > 0) && err == io.EOF:
			if tooLong {
				return nil, errLineTooLong
			}
			return line, nil
		case err != nil:
			return nil, err
		}
		if tooLong {
			return nil, errLineTooLong
		}
		return bytes.TrimSuffix(line, []byte("\n")), nil
	}
}
