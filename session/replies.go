package session

import (
	"encoding/json"

	"github.com/rljail/rljail/bridge"
)

// The protocol's lines to the runner, one type each
// (docs/session-protocol.md; TestProtocolDocExamples holds the doc's
// examples to these types). Every reply carries the request's id and ok;
// the id is set as the reply is sent.

// Reply is the reply to one request.
type Reply interface {
	setID(id json.RawMessage)
}

// ReplyHead is what every reply has.
type ReplyHead struct {
	ID json.RawMessage `json:"id"`
	OK bool            `json:"ok"`
}

func (h *ReplyHead) setID(id json.RawMessage) { h.ID = id }
func (h *ReplyHead) head() *ReplyHead         { return h }

// ErrorReply is a request not done (ok false): the error says why.
type ErrorReply struct {
	ReplyHead
	Error ErrorInfo `json:"error"`
}

// AckReply is the reply of set and of a call_result with an id.
type AckReply struct {
	ReplyHead
}

// HelloReply is hello's.
type HelloReply struct {
	ReplyHead
	Protocol  int            `json:"protocol"`
	Rljail    string         `json:"rljail"`
	SessionID string         `json:"session_id"`
	StartMS   float64        `json:"start_ms"`
	Limits    map[string]any `json:"limits"`
	Tools     []ToolInfo     `json:"tools"`
}

// ToolInfo is a tool the runner declared, as hello lists it.
type ToolInfo struct {
	Name   string   `json:"name"`
	Params []string `json:"params"`
}

// ExecReply is exec's. A lost session's exec has ok false, the
// SessionLost error and what the supervisor measured; names and result
// are then null.
type ExecReply struct {
	ReplyHead
	Cell                    int           `json:"cell"`
	WallMS                  float64       `json:"wall_ms"`
	Stdout                  string        `json:"stdout"`
	Stderr                  string        `json:"stderr"`
	StdoutTruncated         bool          `json:"stdout_truncated"`
	StderrTruncated         bool          `json:"stderr_truncated"`
	StdoutBytes             int64         `json:"stdout_bytes"`
	StderrBytes             int64         `json:"stderr_bytes"`
	OutputBetweenCellsBytes int64         `json:"output_between_cells_bytes"`
	CPUMS                   *float64      `json:"cpu_ms"`
	Calls                   bridge.Counts `json:"calls"`
	Error                   *ErrorInfo    `json:"error"`
	Names                   []string      `json:"names"`
	Result                  *ValueResult  `json:"result"`
}

// GetReply is get's: the value when it serialises (JSON true), else its
// repr.
type GetReply struct {
	ReplyHead
	JSON          bool            `json:"json"`
	Value         json.RawMessage `json:"value,omitempty"`
	Repr          *string         `json:"repr,omitempty"`
	ReprTruncated *bool           `json:"repr_truncated,omitempty"`
}

// LoadContextReply is load_context's.
type LoadContextReply struct {
	ReplyHead
	Names []string `json:"names"`
	Kind  string   `json:"kind"`
}

// PutFileReply is put_file's.
type PutFileReply struct {
	ReplyHead
	Size int64 `json:"size"`
}

// GetFileReply is get_file's: the file, base64.
type GetFileReply struct {
	ReplyHead
	Size int    `json:"size"`
	Data string `json:"data"`
}

// InterruptReply is interrupt's.
type InterruptReply struct {
	ReplyHead
	Interrupted bool `json:"interrupted"`
}

// CloseReply is close's: the session's totals.
type CloseReply struct {
	ReplyHead
	Cells           int     `json:"cells"`
	WallMS          float64 `json:"wall_ms"`
	CPUMS           int64   `json:"cpu_ms"`
	MemoryPeakBytes int64   `json:"memory_peak_bytes"`
	Lost            string  `json:"lost,omitempty"`
}

// ClosedEvent is the last line at the idle timeout.
type ClosedEvent struct {
	ID     json.RawMessage `json:"id"` // null
	Event  string          `json:"event"`
	Reason string          `json:"reason"`
}

func errReply(id json.RawMessage, typ, format string, a ...any) *ErrorReply {
	return &ErrorReply{ReplyHead{ID: id}, verdict(typ, refuse(typ, format, a...).msg)}
}

func lostReply(id json.RawMessage, reason string) *ErrorReply {
	return &ErrorReply{ReplyHead{ID: id}, lostError(reason)}
}

func lostError(reason string) ErrorInfo {
	e := verdict(ErrSessionLost, "the session's jail is gone, and its namespace with it: "+reason)
	e.Reason = reason
	return e
}
