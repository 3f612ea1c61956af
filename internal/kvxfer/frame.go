package kvxfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types.
const (
	framePullRequest  byte = 0x01
	frameProbeRequest byte = 0x02
	framePing         byte = 0x03
	framePong         byte = 0x04
	frameAuth         byte = 0x05 // a probe key; no answer
	frameBlockStart   byte = 0x10
	frameData         byte = 0x11
	frameBlockEnd     byte = 0x12
	frameDone         byte = 0x13
	frameError        byte = 0x1f
)

// protocolVersion is carried by every request; a server refuses others.
const protocolVersion = 1

const (
	headerLen = 5
	// MaxChunkSize bounds a Data frame, and so each side's buffer.
	MaxChunkSize = 4 << 20
	// maxRequestLen bounds a PullRequest: 1 Mi block hashes, far more than
	// any context window holds at 16 tokens a block.
	maxRequestLen = 8<<20 + 64
	// maxControlLen bounds every other non-data frame.
	maxControlLen = 4 << 10
	maxLeaseLen   = 64
)

// errFrameTooLong is returned when a frame's length exceeds what its reader
// allows: on a stream from a trusted peer that means corruption.
var errFrameTooLong = errors.New("frame too long")

// appendHeader appends a frame header for a payload of n bytes.
func appendHeader(dst []byte, typ byte, n int) []byte {
	dst = append(dst, typ)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// frameReader reads frames into one reusable buffer.
type frameReader struct {
	r   *bufio.Reader
	hdr [headerLen]byte
	buf []byte
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// header reads the next frame's header: its type and payload length. The
// payload is left unread, so the caller can decide, from the type, the
// length and the payload's first bytes, whether to read it at all.
func (fr *frameReader) header() (typ byte, n int, err error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, 0, err
	}
	return fr.hdr[0], int(binary.BigEndian.Uint32(fr.hdr[1:])), nil
}

// read fills p from the current frame's payload.
func (fr *frameReader) read(p []byte) error {
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// next reads one frame whose payload may be at most limit bytes. The payload
// is valid until the next call. A stream that ends between frames returns
// io.EOF; one that ends inside a frame returns io.ErrUnexpectedEOF.
func (fr *frameReader) next(limit int) (typ byte, payload []byte, err error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, nil, err
	}
	typ = fr.hdr[0]
	n := int(binary.BigEndian.Uint32(fr.hdr[1:]))
	if n > limit {
		return typ, nil, fmt.Errorf("%w: type 0x%02x, %d bytes, limit %d", errFrameTooLong, typ, n, limit)
	}
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	payload = fr.buf[:n]
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return typ, nil, err
	}
	return typ, payload, nil
}

// pullRequest asks for blocks under a lease.
type pullRequest struct {
	BlockBytes uint32
	Lease      string
	Hashes     []uint64
}

func (m *pullRequest) appendTo(dst []byte) []byte {
	n := 1 + 4 + 1 + len(m.Lease) + 4 + 8*len(m.Hashes)
	dst = appendHeader(dst, framePullRequest, n)
	dst = append(dst, protocolVersion)
	dst = binary.BigEndian.AppendUint32(dst, m.BlockBytes)
	dst = append(dst, byte(len(m.Lease)))
	dst = append(dst, m.Lease...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Hashes)))
	for _, h := range m.Hashes {
		dst = binary.BigEndian.AppendUint64(dst, h)
	}
	return dst
}

var errMalformed = errors.New("malformed frame")

func (m *pullRequest) decode(p []byte) error {
	if len(p) < 6 {
		return errMalformed
	}
	if p[0] != protocolVersion {
		return fmt.Errorf("%w: protocol version %d, want %d", errMalformed, p[0], protocolVersion)
	}
	m.BlockBytes = binary.BigEndian.Uint32(p[1:])
	ll := int(p[5])
	p = p[6:]
	if ll > maxLeaseLen || len(p) < ll+4 {
		return errMalformed
	}
	m.Lease = string(p[:ll])
	p = p[ll:]
	count := int(binary.BigEndian.Uint32(p))
	p = p[4:]
	if len(p) != 8*count {
		return errMalformed
	}
	m.Hashes = make([]uint64, count)
	for i := range m.Hashes {
		m.Hashes[i] = binary.BigEndian.Uint64(p[8*i:])
	}
	return nil
}

// probeRequest asks for N bytes of generated payload, to measure the link.
type probeRequest struct{ N uint64 }

func (m *probeRequest) appendTo(dst []byte) []byte {
	dst = appendHeader(dst, frameProbeRequest, 9)
	dst = append(dst, protocolVersion)
	return binary.BigEndian.AppendUint64(dst, m.N)
}

func (m *probeRequest) decode(p []byte) error {
	if len(p) != 9 {
		return errMalformed
	}
	if p[0] != protocolVersion {
		return fmt.Errorf("%w: protocol version %d, want %d", errMalformed, p[0], protocolVersion)
	}
	m.N = binary.BigEndian.Uint64(p[1:])
	return nil
}

// ping and pong carry a nonce the answer must echo.
type ping struct{ Nonce uint64 }

func (m *ping) appendTo(dst []byte, typ byte) []byte {
	dst = appendHeader(dst, typ, 8)
	return binary.BigEndian.AppendUint64(dst, m.Nonce)
}

func (m *ping) decode(p []byte) error {
	if len(p) != 8 {
		return errMalformed
	}
	m.Nonce = binary.BigEndian.Uint64(p)
	return nil
}

// blockStart announces the next block of a stream.
type blockStart struct {
	Index uint32
	Hash  uint64
	Size  uint32
}

func (m *blockStart) appendTo(dst []byte) []byte {
	dst = appendHeader(dst, frameBlockStart, 16)
	dst = binary.BigEndian.AppendUint32(dst, m.Index)
	dst = binary.BigEndian.AppendUint64(dst, m.Hash)
	return binary.BigEndian.AppendUint32(dst, m.Size)
}

func (m *blockStart) decode(p []byte) error {
	if len(p) != 16 {
		return errMalformed
	}
	m.Index = binary.BigEndian.Uint32(p)
	m.Hash = binary.BigEndian.Uint64(p[4:])
	m.Size = binary.BigEndian.Uint32(p[12:])
	return nil
}

// blockEnd closes a block with the CRC32C of its payload.
type blockEnd struct{ CRC uint32 }

func (m *blockEnd) appendTo(dst []byte) []byte {
	dst = appendHeader(dst, frameBlockEnd, 4)
	return binary.BigEndian.AppendUint32(dst, m.CRC)
}

func (m *blockEnd) decode(p []byte) error {
	if len(p) != 4 {
		return errMalformed
	}
	m.CRC = binary.BigEndian.Uint32(p)
	return nil
}

// done ends a successful answer.
type done struct {
	Blocks uint32
	Bytes  uint64
}

func (m *done) appendTo(dst []byte) []byte {
	dst = appendHeader(dst, frameDone, 12)
	dst = binary.BigEndian.AppendUint32(dst, m.Blocks)
	return binary.BigEndian.AppendUint64(dst, m.Bytes)
}

func (m *done) decode(p []byte) error {
	if len(p) != 12 {
		return errMalformed
	}
	m.Blocks = binary.BigEndian.Uint32(p)
	m.Bytes = binary.BigEndian.Uint64(p[4:])
	return nil
}

// errorFrame refuses a request.
type errorFrame struct {
	Code Code
	Msg  string
}

func (m *errorFrame) appendTo(dst []byte) []byte {
	msg := m.Msg
	if len(msg) > maxControlLen-2 {
		msg = msg[:maxControlLen-2]
	}
	dst = appendHeader(dst, frameError, 2+len(msg))
	dst = binary.BigEndian.AppendUint16(dst, uint16(m.Code))
	return append(dst, msg...)
}

func (m *errorFrame) decode(p []byte) error {
	if len(p) < 2 {
		return errMalformed
	}
	m.Code = Code(binary.BigEndian.Uint16(p))
	m.Msg = string(p[2:])
	return nil
}
