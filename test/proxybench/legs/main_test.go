package main

import (
	"strings"
	"testing"
	"time"
)

// One request through a proxy on 9002 to a worker on 9001, with a bare ACK
// and a direct request to the worker around it.
const capture = `1000.000000 IP 127.0.0.1.5000 > 127.0.0.1.9001: Flags [P.], seq 1:301, ack 1, win 64, length 300
1000.000100 IP 127.0.0.1.9001 > 127.0.0.1.5000: Flags [P.], seq 1:501, ack 301, win 64, length 500
1000.001000 IP 127.0.0.1.6000 > 127.0.0.1.9002: Flags [P.], seq 1:301, ack 1, win 64, length 300
1000.001010 IP 127.0.0.1.9002 > 127.0.0.1.6000: Flags [.], ack 301, win 64, length 0
1000.001080 IP 127.0.0.1.7000 > 127.0.0.1.9001: Flags [P.], seq 1:321, ack 1, win 64, length 320
1000.001280 IP 127.0.0.1.9001 > 127.0.0.1.7000: Flags [P.], seq 1:501, ack 321, win 64, length 500
1000.001300 IP 127.0.0.1.9001 > 127.0.0.1.7000: Flags [P.], seq 501:601, ack 321, win 64, length 100
1000.001350 IP 127.0.0.1.9002 > 127.0.0.1.6000: Flags [P.], seq 1:601, ack 301, win 64, length 600
`

func TestLegs(t *testing.T) {
	pk, err := parse(strings.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	if len(pk) != 7 {
		t.Fatalf("%d packets with a payload, want 7", len(pk))
	}
	in, work, back := legs(pk, 9002, 9001)
	if len(in) != 1 || in[0] != 80*time.Microsecond || work[0] != 200*time.Microsecond || back[0] != 70*time.Microsecond {
		t.Errorf("legs = %v %v %v, want [80µs] [200µs] [70µs]", in, work, back)
	}
}
