package kvxfer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvpayload"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// goldenFrames are one of each frame, with fixed contents.
func goldenFrames() map[string][]byte {
	pr := pullRequest{BlockBytes: 16 * 114688, Lease: "00112233445566778899aabbccddeeff", Hashes: []uint64{1, 0xdeadbeefcafef00d}}
	pq := probeRequest{N: 16 << 20}
	pg := ping{Nonce: 0x0102030405060708}
	bs := blockStart{Index: 3, Hash: 0xdeadbeefcafef00d, Size: 1835008}
	be := blockEnd{CRC: 0xe3069283}
	dn := done{Blocks: 2, Bytes: 3670016}
	ef := errorFrame{Code: CodeLeaseExpired, Msg: "lease expired"}
	data := appendHeader(nil, frameData, 8)
	data = append(data, 1, 2, 3, 4, 5, 6, 7, 8)
	return map[string][]byte{
		"pull_request.bin":  pr.appendTo(nil),
		"probe_request.bin": pq.appendTo(nil),
		"ping.bin":          pg.appendTo(nil, framePing),
		"pong.bin":          pg.appendTo(nil, framePong),
		"block_start.bin":   bs.appendTo(nil),
		"data.bin":          data,
		"block_end.bin":     be.appendTo(nil),
		"done.bin":          dn.appendTo(nil),
		"error.bin":         ef.appendTo(nil),
	}
}

func TestGoldenFrames(t *testing.T) {
	for name, got := range goldenFrames() {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test -update to create)", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: encoding changed:\n got %x\nwant %x", name, got, want)
		}
	}
}

// TestGoldenDecode decodes the golden files and checks the fields, so the
// files pin the decoder as well as the encoder.
func TestGoldenDecode(t *testing.T) {
	read := func(name string) (byte, []byte) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		fr := newFrameReader(bytes.NewReader(b))
		typ, p, err := fr.next(maxRequestLen)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return typ, append([]byte(nil), p...)
	}
	typ, p := read("pull_request.bin")
	var pr pullRequest
	if err := pr.decode(p); typ != framePullRequest || err != nil {
		t.Fatalf("pull_request: type %x, err %v", typ, err)
	}
	if want := (pullRequest{BlockBytes: 1835008, Lease: "00112233445566778899aabbccddeeff", Hashes: []uint64{1, 0xdeadbeefcafef00d}}); !reflect.DeepEqual(pr, want) {
		t.Errorf("pull_request = %+v, want %+v", pr, want)
	}
	typ, p = read("block_start.bin")
	var bs blockStart
	if err := bs.decode(p); typ != frameBlockStart || err != nil || bs != (blockStart{3, 0xdeadbeefcafef00d, 1835008}) {
		t.Errorf("block_start = %+v (type %x, err %v)", bs, typ, err)
	}
	typ, p = read("error.bin")
	var ef errorFrame
	if err := ef.decode(p); typ != frameError || err != nil || ef != (errorFrame{CodeLeaseExpired, "lease expired"}) {
		t.Errorf("error = %+v (type %x, err %v)", ef, typ, err)
	}
	typ, p = read("done.bin")
	var dn done
	if err := dn.decode(p); typ != frameDone || err != nil || dn != (done{2, 3670016}) {
		t.Errorf("done = %+v (type %x, err %v)", dn, typ, err)
	}
}

func TestFrameReaderLimits(t *testing.T) {
	b := appendHeader(nil, frameData, 100)
	b = append(b, make([]byte, 100)...)
	fr := newFrameReader(bytes.NewReader(b))
	if _, _, err := fr.next(99); !errors.Is(err, errFrameTooLong) {
		t.Errorf("next(99) on a 100-byte frame = %v, want errFrameTooLong", err)
	}
	fr = newFrameReader(bytes.NewReader(b[:50]))
	if _, _, err := fr.next(1000); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("frame cut inside its payload: err = %v, want io.ErrUnexpectedEOF", err)
	}
	fr = newFrameReader(bytes.NewReader(nil))
	if _, _, err := fr.next(1000); err != io.EOF {
		t.Errorf("empty stream: err = %v, want io.EOF", err)
	}
}

// FuzzDecodeFrames feeds arbitrary bytes to the server's request decoders
// and the client's answer decoder. Neither may panic or allocate beyond its
// limits; a request that decodes must re-encode to the same bytes; and the
// client may deliver a block only if the stream carried its exact payload.
func FuzzDecodeFrames(f *testing.F) {
	for _, b := range goldenFrames() {
		f.Add(b)
	}
	// A valid two-block answer with 16-byte blocks.
	f.Add(validAnswer([]uint64{7, 9}, 16, 8))
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := newFrameReader(bytes.NewReader(in))
		for {
			typ, p, err := fr.next(maxRequestLen)
			if err != nil {
				break
			}
			var enc []byte
			switch typ {
			case framePullRequest:
				var m pullRequest
				if m.decode(p) == nil {
					enc = m.appendTo(nil)
				}
			case frameProbeRequest:
				var m probeRequest
				if m.decode(p) == nil {
					enc = m.appendTo(nil)
				}
			case framePing, framePong:
				var m ping
				if m.decode(p) == nil {
					enc = m.appendTo(nil, typ)
				}
			case frameBlockStart:
				var m blockStart
				if m.decode(p) == nil {
					enc = m.appendTo(nil)
				}
			case frameDone:
				var m done
				if m.decode(p) == nil {
					enc = m.appendTo(nil)
				}
			}
			if enc != nil {
				want := appendHeader(nil, typ, len(p))
				want = append(want, p...)
				if !bytes.Equal(enc, want) {
					t.Fatalf("type %x: decode/encode round trip changed %x to %x", typ, want, enc)
				}
			}
		}
		hashes := []uint64{7, 9}
		cfr := newFrameReader(bytes.NewReader(in))
		delivered := 0
		err := receiveBlocks(func(limit int) (byte, []byte, error) { return readAnswerFrame(cfr, limit) },
			hashes, 16, true, func(h uint64) error {
				if h != hashes[delivered] {
					t.Fatalf("delivered %d, want %d", h, hashes[delivered])
				}
				delivered++
				return nil
			})
		if err == nil && !bytes.HasPrefix(in, validAnswer(hashes, 16, 8)) && !equivalentAnswer(in, hashes) {
			t.Fatalf("accepted a stream that is not a valid answer: %x", in)
		}
	})
}

// validAnswer builds the server's answer for hashes with the given block
// and chunk sizes, as the server would send it.
func validAnswer(hashes []uint64, size, chunk int) []byte {
	var out []byte
	for i, h := range hashes {
		bs := blockStart{Index: uint32(i), Hash: h, Size: uint32(size)}
		out = bs.appendTo(out)
		var crc uint32
		for off := 0; off < size; off += chunk {
			n := min(chunk, size-off)
			out = appendHeader(out, frameData, n)
			p := make([]byte, n)
			kvpayload.Fill(h, off, p)
			crc = crc32.Update(crc, castagnoli, p)
			out = append(out, p...)
		}
		be := blockEnd{CRC: crc}
		out = be.appendTo(out)
	}
	d := done{Blocks: uint32(len(hashes)), Bytes: uint64(size * len(hashes))}
	return d.appendTo(out)
}

// equivalentAnswer reports whether in starts with a valid answer for hashes
// under some chunking: the decoded payload of each block must be its exact
// bytes. The fuzzer can legitimately find other chunkings.
func equivalentAnswer(in []byte, hashes []uint64) bool {
	fr := newFrameReader(bytes.NewReader(in))
	for _, h := range hashes {
		typ, p, err := fr.next(maxRequestLen)
		if err != nil || typ != frameBlockStart || binary.BigEndian.Uint64(p[4:]) != h {
			return false
		}
		var got []byte
		for len(got) < 16 {
			typ, p, err := fr.next(maxRequestLen)
			if err != nil || typ != frameData {
				return false
			}
			got = append(got, p...)
		}
		want := make([]byte, 16)
		kvpayload.Fill(h, 0, want)
		if !bytes.Equal(got, want) {
			return false
		}
		if typ, _, err := fr.next(maxRequestLen); err != nil || typ != frameBlockEnd {
			return false
		}
	}
	typ, _, err := fr.next(maxRequestLen)
	return err == nil && typ == frameDone
}
