// Package h2proxy is a loopback TCP proxy for tests that relays plaintext
// gRPC (HTTP/2) connections and counts the frames each side sent.
package h2proxy

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
)

// HTTP/2 frame types and flags a Proxy counts (RFC 9113, section 6).
const (
	frameData = 0x0
	framePing = 0x6
	flagAck   = 0x1
)

// clientPreface opens every HTTP/2 connection, from the client.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// FrameCounts are the frames one side of a connection sent.
type FrameCounts struct {
	Data int
	// Pings are PING frames that are not acks: each asks the other side
	// for one more write.
	Pings int
}

// Proxy relays connections to one address and counts the frames each
// side sent.
type Proxy struct {
	Addr string

	mu                     sync.Mutex
	fromClient, fromServer FrameCounts
}

// New relays connections to target until the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("h2proxy: listen: %v", err)
	}
	p := &Proxy{Addr: lis.Addr().String()}
	var wg sync.WaitGroup
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		_ = lis.Close()
		connsMu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := lis.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, client, server)
			connsMu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				p.relay(server, client, &p.fromClient, len(clientPreface))
				_ = server.Close()
			}()
			go func() {
				defer wg.Done()
				p.relay(client, server, &p.fromServer, 0)
				_ = client.Close()
			}()
		}
	}()
	return p
}

// FromClient and FromServer are the frames counted so far.
func (p *Proxy) FromClient() FrameCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fromClient
}

func (p *Proxy) FromServer() FrameCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fromServer
}

// relay copies src to dst, counting the frames after the first skip
// bytes into counts.
func (p *Proxy) relay(dst io.Writer, src io.Reader, counts *FrameCounts, skip int) {
	var pending []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			pending = append(pending, buf[:n]...)
			if skip > 0 {
				k := min(skip, len(pending))
				pending, skip = pending[k:], skip-k
			}
			pending = p.count(pending, counts)
		}
		if err != nil {
			return
		}
	}
}

// count counts the whole frames at the start of b and returns the rest.
func (p *Proxy) count(b []byte, counts *FrameCounts) []byte {
	for len(b) >= 9 {
		length := int(b[0])<<16 | int(binary.BigEndian.Uint16(b[1:3]))
		if len(b) < 9+length {
			break
		}
		typ, flags := b[3], b[4]
		p.mu.Lock()
		switch {
		case typ == frameData:
			counts.Data++
		case typ == framePing && flags&flagAck == 0:
			counts.Pings++
		}
		p.mu.Unlock()
		b = b[9+length:]
	}
	return b
}
