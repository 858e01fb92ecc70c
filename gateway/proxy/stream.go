package proxy

import (
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"
)

// ErrTooSlow: a streamed report moved less than the minimum rate over a
// window after its grace, and was cut.
var ErrTooSlow = errors.New("stream below the minimum transfer rate")

// Hold is what an answer holds until it is done (the vendor's in-flight
// slot): a streamed answer keeps it until its body ends.
type Hold = interface{ Release() }

// MinRate is the floor of a streamed body's progress: after Grace, each
// Window must move at least Bytes × Window / 1s bytes. Zero Bytes is off.
type MinRate struct {
	Bytes  int // a second
	Window time.Duration
	Grace  time.Duration
}

// streamBody is a report's body on its way from the backend to the client:
// the backend's answer (its head copied to the client's, its body read
// here), the slot it holds, and the pacing of its minimum rate. fasthttp's
// server reads it and writes what it read to the client on the same
// goroutine, then closes it (CloseWithError) once, whether the body ended
// whole or was cut; a response reset before it was written closes it too.
// It comes from and goes back to Proxy.bodies.
type streamBody struct {
	resp fasthttp.Response // the backend's answer
	body io.Reader         // resp's body stream
	hold Hold              // given back on close; nil for none
	p    *Proxy

	// Pacing, when conn is set (the client's connection is bounded by
	// progress: idleconn.Stream lifted the whole-answer deadline): the
	// window in force ends at windowEnd with left bytes still due (none
	// during the grace); quota is what each window needs.
	conn      writeDeadliner
	now       func() time.Time
	windowEnd time.Time
	left      int64
	quota     int64
	window    time.Duration
	idle      time.Duration
	// rateBound: the write deadline in force is the rate's, not idle's.
	rateBound bool
	tooSlow   bool
	closed    bool
}

// writeDeadliner is what pacing needs of the server's request context.
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// pace starts the floor at now: nothing is due during the grace, then each
// window needs its quota.
func (s *streamBody) pace(conn writeDeadliner, r MinRate, idle time.Duration, now func() time.Time) {
	s.conn, s.now, s.window, s.idle = conn, now, r.Window, idle
	s.quota = int64(float64(r.Bytes) * r.Window.Seconds())
	s.windowEnd, s.left = now().Add(r.Grace), 0
}

// roll moves the window up to now; it fails when a window ended with
// bytes still due.
func (s *streamBody) roll(now time.Time) error {
	for !now.Before(s.windowEnd) {
		if s.left > 0 {
			s.tooSlow = true
			return ErrTooSlow
		}
		s.windowEnd = s.windowEnd.Add(s.window)
		s.left = s.quota
	}
	return nil
}

// Read reads the backend's body. Paced, it reads no more than the window
// still needs (so that a write cut at the window's end never held bytes
// the floor did not ask for), and bounds the write of what it returns: by
// the window's end when those bytes are due in it, else by the next
// window's end; and by the idle timeout either way.
func (s *streamBody) Read(p []byte) (int, error) {
	if s.conn == nil {
		return s.body.Read(p)
	}
	if err := s.roll(s.now()); err != nil {
		return 0, err
	}
	due := s.left > 0
	if due && int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.body.Read(p)
	if n == 0 {
		return n, err
	}
	s.left -= int64(n)
	now := s.now()
	if rerr := s.roll(now); rerr != nil {
		return 0, rerr
	}
	deadline := s.windowEnd
	if !due {
		deadline = deadline.Add(s.window)
	}
	s.rateBound = true
	if idle := now.Add(s.idle); idle.Before(deadline) {
		deadline, s.rateBound = idle, false
	}
	if derr := s.conn.SetWriteDeadline(deadline); derr != nil {
		return 0, derr
	}
	return n, err
}

// CloseWithError closes the backend's body (err, the write's failure,
// tells it the body was not read whole: its connection is closed, not
// reused), gives the slot back, and returns s to the pool. It runs once:
// fasthttp closes a body stream once and forgets it, and a second call is
// ignored.
func (s *streamBody) CloseWithError(err error) error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.tooSlow || s.rateBound && isTimeout(err) {
		s.p.onTooSlow()
	}
	if rc, ok := s.body.(fasthttp.ReadCloserWithError); ok {
		_ = rc.CloseWithError(err)
	}
	if s.hold != nil {
		s.hold.Release()
	}
	s.p.putBody(s)
	return nil
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// getBody is a streamBody ready for a call.
func (p *Proxy) getBody() *streamBody {
	if s, ok := p.bodies.Get().(*streamBody); ok {
		return s
	}
	return &streamBody{p: p}
}

// putBody resets s and pools it.
func (p *Proxy) putBody(s *streamBody) {
	s.resp.Reset()
	s.body, s.hold, s.conn, s.now = nil, nil, nil, nil
	s.rateBound, s.tooSlow, s.closed = false, false, false
	p.bodies.Put(s)
}
