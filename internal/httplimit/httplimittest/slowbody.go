// Package httplimittest drives slow and hostile clients against an HTTP
// server running in the test's own process, and counts the process's
// descriptors, to test the limits of package httplimit end to end.
//
// It imports nothing of this module.
package httplimittest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// OpenFDs returns how many descriptors the process has open (from
// /proc/self/fd); ok is false where that cannot be read.
func OpenFDs() (n int, ok bool) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	return len(ents), true
}

// SlowBody connects to addr and sends a POST for path whose headers
// announce a body of announced bytes, then only the first sent of them,
// then nothing. The caller closes the connection.
func SlowBody(addr, path string, announced, sent int) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, announced)
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", max(announced, 0))
	if _, err := io.WriteString(c, head+body[:min(max(sent, 0), announced)]); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// SlowBodies is the slow-body attack: Clients connections each send
// headers announcing a 1000-byte body and 28 bytes of it, then nothing,
// while an ordinary request must still be served, each slow client must
// be answered 408 and disconnected once the server's body deadline has
// passed, and the process's descriptors must return to where they were.
type SlowBodies struct {
	Addr, Path string
	Clients    int
	// Normal sends one ordinary request and returns an error unless it
	// was answered as usual. It runs once before the attack (a warm-up
	// that opens what the server keeps open, such as upstream
	// connections) and once during it.
	Normal func() error
	// Wait bounds each slow client's wait for its answer: the server's
	// body timeout plus a generous margin.
	Wait time.Duration
}

// fdSlack is how far the descriptor count may stray from the baseline
// and still count as at it (connections of earlier tests closing, a
// keep-alive connection opened meanwhile).
const fdSlack = 16

// Run runs the attack and fails t with what went wrong.
func (s SlowBodies) Run(t testing.TB) {
	t.Helper()
	if err := s.Normal(); err != nil {
		t.Fatalf("warm-up request: %v", err)
	}
	base, haveFDs := OpenFDs()
	conns := make([]net.Conn, 0, s.Clients)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range s.Clients {
		c, err := SlowBody(s.Addr, s.Path, 1000, 28)
		if err != nil {
			t.Fatalf("slow client %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	if haveFDs && !waitFor(30*time.Second, func() bool { n, _ := OpenFDs(); return n >= base+2*s.Clients-fdSlack }) {
		n, _ := OpenFDs()
		t.Fatalf("the server did not accept the %d slow connections: %d descriptors open, %d before", s.Clients, n, base)
	}
	start := time.Now()
	if err := s.Normal(); err != nil {
		t.Fatalf("with %d slow clients connected, an ordinary request failed: %v", s.Clients, err)
	}
	t.Logf("with %d slow clients connected, an ordinary request took %v", s.Clients, time.Since(start))

	statuses := s.answers(conns)
	if statuses[http.StatusRequestTimeout] != s.Clients {
		t.Fatalf("slow clients' answers by status (0: none within %v): %v; want all %d answered 408", s.Wait, statuses, s.Clients)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	if haveFDs && !waitFor(30*time.Second, func() bool { n, _ := OpenFDs(); return n <= base+fdSlack }) {
		n, _ := OpenFDs()
		t.Fatalf("descriptors did not return to the baseline: %d open, %d before the attack", n, base)
	}
}

// answers reads each slow connection's answer until the server closes it,
// and counts the answers by status (0: no answer and no close within
// s.Wait, or an unreadable one).
func (s SlowBodies) answers(conns []net.Conn) map[int]int {
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			status := 0
			_ = c.SetReadDeadline(time.Now().Add(s.Wait))
			br := bufio.NewReader(c)
			if resp, err := http.ReadResponse(br, nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				// The server must also close the connection.
				if _, err := br.ReadByte(); err == io.EOF {
					status = resp.StatusCode
				}
			}
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return statuses
}

func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PostOK returns a SlowBodies.Normal that POSTs body (JSON) to url on a
// fresh connection and wants a 200 answer read to its end.
func PostOK(url, body string) func() error {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	return func() error {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return err
	}
}
