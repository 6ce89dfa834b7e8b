package proc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Ports are chosen from lowestPort up to the ephemeral range and above it.
// Below 20000 many services listen by convention.
const lowestPort = 20000

// defaultEphemeral is Linux's default ip_local_port_range, used where it
// cannot be read.
var defaultEphemeral = [2]int{32768, 60999}

// Reservation is a set of loopback TCP ports held for one user of the
// machine until Release. Each port was free when reserved, lies outside
// the kernel's ephemeral range (so no outgoing connection takes it before
// the process that is given it listens), and is locked with a lock file
// (flock) that every reservation in every process honours: two test
// binaries, or two clusters in one, never get the same port. The locks are
// the registry; the kernel drops them when a process dies.
type Reservation struct {
	Ports []int

	once  sync.Once
	locks []*os.File
}

// ReservePorts reserves n distinct ports.
func ReservePorts(n int) (*Reservation, error) { return reserve(n, false) }

// ReservePortRun reserves n consecutive ports, Ports[0] to Ports[0]+n-1,
// for programs that number their ports from a base.
func ReservePortRun(n int) (*Reservation, error) { return reserve(n, true) }

// Addr is "127.0.0.1:<Ports[i]>".
func (r *Reservation) Addr(i int) string { return LoopbackAddr(r.Ports[i]) }

// Release gives the ports back. Safe to call more than once.
func (r *Reservation) Release() {
	r.once.Do(func() {
		for _, f := range r.locks {
			_ = f.Close() // closing the last descriptor drops the flock
		}
		r.locks = nil
	})
}

// LoopbackAddr is "127.0.0.1:<port>".
func LoopbackAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// portRanges are the port ranges outside the ephemeral range.
func portRanges() ([][2]int, error) {
	eph := defaultEphemeral
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, err1 := strconv.Atoi(f[0])
			hi, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && lo <= hi {
				eph = [2]int{lo, hi}
			}
		}
	}
	var out [][2]int
	if eph[0]-1 >= lowestPort {
		out = append(out, [2]int{lowestPort, eph[0] - 1})
	}
	if eph[1]+1 <= 65535 {
		out = append(out, [2]int{max(eph[1]+1, lowestPort), 65535})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("reserve ports: the ephemeral range %d-%d leaves no port from %d up outside it", eph[0], eph[1], lowestPort)
	}
	return out, nil
}

func reserve(n int, consecutive bool) (*Reservation, error) {
	if n < 1 {
		return nil, fmt.Errorf("reserve %d ports: want at least 1", n)
	}
	ranges, err := portRanges()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("cohort-ports-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("reserve ports: %w", err)
	}
	r := &Reservation{}
	for tries := 0; len(r.Ports) < n; tries++ {
		if tries == 10000 {
			r.Release()
			return nil, fmt.Errorf("reserve %d ports in %v: no free ones found", n, ranges)
		}
		run := 1
		if consecutive {
			run = n
		}
		base, ok := pick(ranges, run)
		if !ok {
			r.Release()
			return nil, fmt.Errorf("reserve %d consecutive ports: no range of %v is that long", n, ranges)
		}
		var got []*os.File
		for p := base; p < base+run; p++ {
			f, err := take(dir, p)
			if err != nil {
				break
			}
			got = append(got, f)
		}
		if len(got) < run {
			for _, f := range got {
				_ = f.Close()
			}
			continue
		}
		for i, f := range got {
			r.Ports = append(r.Ports, base+i)
			r.locks = append(r.locks, f)
		}
	}
	return r, nil
}

// pick is a random base for run ports inside one of ranges.
func pick(ranges [][2]int, run int) (int, bool) {
	total := 0
	for _, rg := range ranges {
		total += max(0, rg[1]-rg[0]+2-run)
	}
	if total == 0 {
		return 0, false
	}
	i := rand.IntN(total)
	for _, rg := range ranges {
		size := max(0, rg[1]-rg[0]+2-run)
		if i < size {
			return rg[0] + i, true
		}
		i -= size
	}
	return 0, false
}

var errPortTaken = errors.New("port taken")

// take locks port's lock file and checks that nothing listens on the port.
func take(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, errPortTaken
	}
	l, err := net.Listen("tcp", LoopbackAddr(port))
	if err != nil {
		_ = f.Close()
		return nil, errPortTaken
	}
	_ = l.Close()
	return f, nil
}
