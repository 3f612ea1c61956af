package linkemu

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate is a link rate in bytes per second.
type Rate float64

// BytesPerSecond returns r as a plain float.
func (r Rate) BytesPerSecond() float64 { return float64(r) }

// TCPGoodput is the payload rate one TCP stream gets from a link of line
// rate r: each 1,500-byte Ethernet frame carries 1,448 bytes of payload
// (IP and TCP headers with timestamps) and occupies 1,538 bytes of wire
// time (preamble, header, FCS, inter-frame gap). So 1 Gbit/s carries
// 117.7 MB/s; measured here through a tc-shaped veth: 118.9 MB/s. The
// emulation shapes to this so that it agrees with a real link of the same
// line rate.
func (r Rate) TCPGoodput() Rate { return r * 1448 / 1538 }

// String renders the rate in bits per second with a decimal prefix, marked as
// emulated: "1 Gbit/s (emulated)".
func (r Rate) String() string {
	bits := float64(r) * 8
	units := []struct {
		scale float64
		name  string
	}{{1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}}
	for _, u := range units {
		if bits >= u.scale {
			return strconv.FormatFloat(bits/u.scale, 'g', 4, 64) + " " + u.name + " (emulated)"
		}
	}
	return strconv.FormatFloat(bits, 'g', 4, 64) + " bit/s (emulated)"
}

// ParseRate parses a link rate such as "1gbit", "10gbit", "100mbit", "10gbps",
// "125MB/s" or "1.5GiB/s" into bytes per second. See the package comment for
// the units.
func ParseRate(s string) (Rate, error) {
	in := strings.TrimSpace(s)
	// Units never start with 'e', so the number is the leading run of
	// digits, '.', exponent and sign characters.
	i := strings.IndexFunc(in, func(c rune) bool {
		return !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')
	})
	if i < 0 {
		i = len(in)
	}
	num, unit := in[:i], strings.TrimSpace(in[i:])
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("linkemu: rate %q: want a number and a unit, e.g. 1gbit or 125MB/s", s)
	}
	mult, err := unitMultiplier(unit)
	if err != nil {
		return 0, fmt.Errorf("linkemu: rate %q: %w", s, err)
	}
	r := v * mult
	if r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return 0, fmt.Errorf("linkemu: rate %q: must be positive and finite", s)
	}
	return Rate(r), nil
}

// unitMultiplier returns the bytes-per-second value of one unit.
func unitMultiplier(unit string) (float64, error) {
	u, perSec := strings.CutSuffix(unit, "/s")
	ps := false
	if !perSec {
		u, ps = strings.CutSuffix(unit, "ps")
	}
	prefix := func(p string) (float64, bool) {
		switch strings.ToLower(p) {
		case "":
			return 1, true
		case "k":
			return 1e3, true
		case "m":
			return 1e6, true
		case "g":
			return 1e9, true
		case "t":
			return 1e12, true
		}
		return 0, false
	}
	lu := strings.ToLower(u)
	switch {
	case strings.HasSuffix(lu, "bit"):
		if m, ok := prefix(u[:len(u)-3]); ok {
			return m / 8, nil
		}
	case strings.HasSuffix(u, "iB"):
		switch strings.ToLower(u[:len(u)-2]) {
		case "k":
			return 1 << 10, nil
		case "m":
			return 1 << 20, nil
		case "g":
			return 1 << 30, nil
		case "t":
			return 1 << 40, nil
		}
	case strings.HasSuffix(u, "B"):
		if m, ok := prefix(u[:len(u)-1]); ok {
			return m, nil
		}
	case strings.HasSuffix(u, "b") && ps:
		// "gbps", "Mbps": the networking convention is bits.
		if m, ok := prefix(u[:len(u)-1]); ok {
			return m / 8, nil
		}
	case strings.HasSuffix(u, "b"):
		return 0, fmt.Errorf("unit %q is ambiguous: write bit (e.g. 100mbit) or B for bytes (e.g. 100MB/s)", unit)
	}
	return 0, fmt.Errorf("unknown unit %q: use bit, kbit, mbit, gbit, gbps, B/s, KB/s, MB/s, GB/s or KiB/MiB/GiB", unit)
}
