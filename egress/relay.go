package egress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rljail/rljail/jail"
)

// sniffWait is how long a tunnel waits for the client's first bytes
// before it dials anyway (a protocol where the server speaks first); the
// first bytes are inspected whenever they come.
const sniffWait = time.Second

// conversation is one proxied connection, from the request to the end.
type conversation struct {
	s      *Server
	client net.Conn
	start  time.Time
	inDone chan struct{} // copyIn has ended

	active atomic.Int64 // the last transfer either way, Unix nanoseconds

	mu  sync.Mutex
	rec jail.Connection
	cut string // why a direction was cut short
}

func (s *Server) newConversation(client net.Conn, via string) *conversation {
	c := &conversation{s: s, client: client, rec: jail.Connection{Via: via}, start: time.Now(), inDone: make(chan struct{})}
	c.active.Store(c.start.UnixNano())
	return c
}

// finish records the conversation once.
func (c *conversation) finish(verdict, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec.Verdict, c.rec.Reason = verdict, reason
	c.rec.DurationMS = time.Since(c.start).Milliseconds()
	c.s.record(c.rec)
}

// refuseOrFail records a check's error: a refusal by the list, or a
// failure (the name did not resolve).
func (c *conversation) refuseOrFail(err error) {
	if isRefusal(err) {
		c.finish("refused", err.Error())
	} else {
		c.finish("failed", err.Error())
	}
}

// tunnel finishes a checked conversation: it takes the client's first
// bytes (already read ones in first), refuses them when they name
// another host than the one checked (inspect), dials the checked address
// and relays both ways under the run's limits; of plain HTTP it passes
// one request on (tunnelRequest), and the answer back.
func (c *conversation) tunnel(t target, first []byte) {
	s := c.s
	c.rec.Address = t.Addr.String()
	if len(first) == 0 {
		var err error
		first, err = readFirst(c.client, sniffWait)
		if err != nil && !isTimeout(err) {
			c.finish("failed", "the client went away: "+err.Error())
			return
		}
	}
	if len(first) > 0 {
		if why := inspect(first, t); why != "" {
			c.refuseFirst(first, why)
			return
		}
	}
	up, err := s.dial(s.ctx, t)
	if err != nil {
		c.finish("failed", "connect from the host: "+err.Error())
		return
	}
	defer up.Close()
	go c.copyIn(up)
	if len(first) == 0 {
		// The server may speak first; the client's first bytes are still
		// inspected before any of them goes out.
		first, err = readFirst(c.client, s.limits.IdleTimeout)
		if err != nil || len(first) == 0 {
			// The client said nothing within the idle time (or left):
			// both ends go, and the server's part is counted.
			c.client.Close()
			up.Close()
			<-c.waitIn()
			c.finish("allowed", c.cutReason())
			return
		}
		if why := inspect(first, t); why != "" {
			up.Close()
			<-c.waitIn()
			c.refuseFirst(first, why)
			return
		}
	}
	if guessHTTP(first) == isHTTP {
		// Plain HTTP: its one request, and nothing after it
		// (onerequest.go says why).
		c.tunnelRequest(up, t, first)
	} else {
		c.relayOut(up, first)
	}
	<-c.waitIn()
	c.finish("allowed", c.cutReason())
}

// refuseFirst refuses a tunnel for its first bytes; an HTTP client is
// told why in an answer of the proxy's (httpRefuse), as the forward proxy
// tells it.
func (c *conversation) refuseFirst(first []byte, why string) {
	if guessHTTP(first) == isHTTP {
		httpRefuse(c.client, 403, why)
	}
	c.finish("refused", why)
}

// copyIn passes the server's bytes to the client, in its own goroutine.
func (c *conversation) copyIn(up net.Conn) {
	defer close(c.inDone)
	n, why := c.s.pipe(c.client, up, nil, c.start, &c.active)
	c.mu.Lock()
	c.rec.BytesIn = n
	c.mu.Unlock()
	c.setCut(why)
}

// relayOut passes the client's bytes (first before them) to the server.
func (c *conversation) relayOut(up net.Conn, first []byte) {
	n, why := c.s.pipe(up, c.client, first, c.start, &c.active)
	c.mu.Lock()
	c.rec.BytesOut = n
	c.mu.Unlock()
	c.setCut(why)
}

func (c *conversation) waitIn() <-chan struct{} { return c.inDone }

func (c *conversation) setCut(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if why != "" && c.cut == "" {
		c.cut = why
	}
}

func (c *conversation) cutReason() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// pipe copies src to dst (first before it) until EOF, an error, the
// idle timeout (nothing moved either way: active is the conversation's
// last transfer, in Unix nanoseconds), the run's byte budget or the
// connection's longest time; it returns the bytes passed and why it cut
// the copy short ("" for an ordinary end). At src's end dst's write side
// is shut, so that a half-closed conversation still completes.
func (s *Server) pipe(dst, src net.Conn, first []byte, start time.Time, active *atomic.Int64) (int64, string) {
	var total int64
	write := func(b []byte) string {
		if s.bytesAll.Add(int64(len(b))) > s.limits.MaxBytes {
			return fmt.Sprintf("the run's %d bytes of egress were used up", s.limits.MaxBytes)
		}
		_ = dst.SetWriteDeadline(time.Now().Add(s.limits.IdleTimeout))
		n, err := dst.Write(b)
		total += int64(n)
		active.Store(time.Now().UnixNano())
		if err != nil {
			return "closed"
		}
		return ""
	}
	cut := func(why string) (int64, string) {
		dst.Close()
		src.Close()
		return total, cutWhy(why)
	}
	if len(first) > 0 {
		if why := write(first); why != "" {
			return cut(why)
		}
	}
	buf := make([]byte, 32<<10)
	for {
		deadline := time.Now().Add(s.limits.IdleTimeout)
		if s.limits.MaxDuration > 0 && start.Add(s.limits.MaxDuration).Before(deadline) {
			deadline = start.Add(s.limits.MaxDuration)
		}
		_ = src.SetReadDeadline(deadline)
		n, err := src.Read(buf)
		if n > 0 {
			if why := write(buf[:n]); why != "" {
				return cut(why)
			}
		}
		if err == nil {
			continue
		}
		if isTimeout(err) {
			if s.limits.MaxDuration > 0 && time.Since(start) >= s.limits.MaxDuration {
				return cut(fmt.Sprintf("open longer than %s", s.limits.MaxDuration))
			}
			if time.Since(time.Unix(0, active.Load())) < s.limits.IdleTimeout {
				continue // the other direction moves
			}
			return cut(fmt.Sprintf("idle for %s", s.limits.IdleTimeout))
		}
		if err == io.EOF {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return total, ""
			}
		}
		return cut("closed")
	}
}

func cutWhy(why string) string {
	if why == "closed" {
		return ""
	}
	return why
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// readFirst reads the client's first bytes within wait: a whole TLS
// record when they start one (the ClientHello, for its SNI), an HTTP
// request's head when they start one, else what one read gives.
func readFirst(c net.Conn, wait time.Duration) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if complete(buf) || len(buf) >= maxFirst {
			return buf, nil
		}
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				return buf, nil
			}
			if isTimeout(err) && len(buf) > 0 {
				return buf, nil
			}
			return buf, err
		}
	}
}

// maxFirst bounds what is read before the first bytes are judged.
const maxFirst = 16<<10 + 5
