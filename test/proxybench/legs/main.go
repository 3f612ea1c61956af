// Command legs splits each proxy's added latency into its two legs, from a
// packet capture of sequential requests on loopback (scripts/hop-legs.sh):
//
//   - in → up: from the client's request arriving at the proxy to the
//     proxy's request leaving for the worker (waking, reading, parsing,
//     routing, writing);
//   - worker: from there to the worker's first answer bytes;
//   - back → client: from those bytes arriving at the proxy to the proxy's
//     first bytes leaving for the client.
//
// It reads `tcpdump -nn -tt -r FILE` text on standard input. Timestamps are
// the kernel's, taken as each packet is sent on lo, so the figures include
// the time the kernel takes to wake the process, which the proxy's own
// timers cannot see.
//
//	tcpdump -nn -tt -r cap.pcap | legs --worker 18901 --proxy nginx=18902 --proxy switchyard=18903
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bench"
)

type packet struct {
	at       time.Duration // since the first packet
	src, dst int
	n        int
}

type proxies []struct {
	name string
	port int
}

func (p *proxies) String() string { return fmt.Sprint(*p) }
func (p *proxies) Set(v string) error {
	name, port, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(port)
	if !ok || err != nil {
		return fmt.Errorf("want name=port, got %q", v)
	}
	*p = append(*p, struct {
		name string
		port int
	}{name, n})
	return nil
}

// line matches tcpdump's "1796299524.120109 IP 127.0.0.1.51970 > 127.0.0.1.19003: ... length 85".
var line = regexp.MustCompile(`^(\d+)\.(\d{6}) IP [\d.]+\.(\d+) > [\d.]+\.(\d+): .* length (\d+)`)

func parse(r io.Reader) ([]packet, error) {
	var out []packet
	var t0 time.Duration
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		sec, _ := strconv.ParseInt(m[1], 10, 64)
		usec, _ := strconv.ParseInt(m[2], 10, 64)
		at := time.Duration(sec)*time.Second + time.Duration(usec)*time.Microsecond
		n, _ := strconv.Atoi(m[5])
		if n == 0 {
			continue // a bare ACK
		}
		src, _ := strconv.Atoi(m[3])
		dst, _ := strconv.Atoi(m[4])
		if len(out) == 0 {
			t0 = at
		}
		out = append(out, packet{at: at - t0, src: src, dst: dst, n: n})
	}
	return out, sc.Err()
}

// legs follows each request to proxy through the worker and back.
func legs(pk []packet, proxy, worker int) (in, work, back []time.Duration) {
	next := func(from int, ok func(p packet) bool) int {
		for j := from; j < len(pk); j++ {
			if ok(pk[j]) {
				return j
			}
		}
		return -1
	}
	for i, p := range pk {
		if p.dst != proxy || p.n < 100 { // a request, not a stray byte
			continue
		}
		client := p.src
		j := next(i+1, func(q packet) bool { return q.dst == worker })
		if j < 0 {
			break
		}
		up := pk[j].src
		k := next(j+1, func(q packet) bool { return q.src == worker && q.dst == up })
		if k < 0 {
			break
		}
		q := next(k+1, func(q packet) bool { return q.src == proxy && q.dst == client })
		if q < 0 {
			break
		}
		in = append(in, pk[j].at-p.at)
		work = append(work, pk[k].at-pk[j].at)
		back = append(back, pk[q].at-pk[k].at)
	}
	return in, work, back
}

// median is the p50 of d, in microseconds.
func median(d []time.Duration) float64 {
	us := make([]float64, len(d))
	for i, x := range d {
		us[i] = float64(x.Nanoseconds()) / 1e3
	}
	slices.Sort(us)
	return bench.Percentile(us, 50)
}

func main() {
	var ps proxies
	worker := flag.Int("worker", 0, "the worker's port")
	flag.Var(&ps, "proxy", "name=port of a proxy in front of the worker (repeat)")
	flag.Parse()
	if *worker == 0 || len(ps) == 0 {
		fmt.Fprintln(os.Stderr, "legs: --worker PORT and at least one --proxy name=PORT are required")
		os.Exit(2)
	}
	pk, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "legs: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("| proxy | requests | in → up p50 | worker p50 | back → client p50 | both legs |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, p := range ps {
		in, work, back := legs(pk, p.port, *worker)
		if len(in) == 0 {
			fmt.Fprintf(os.Stderr, "legs: no request to %s (port %d) in the capture\n", p.name, p.port)
			os.Exit(1)
		}
		fmt.Printf("| %s | %d | %.0f µs | %.0f µs | %.0f µs | %.0f µs |\n", p.name, len(in), median(in), median(work), median(back), median(in)+median(back))
	}
}
