package kvxfer

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"
)

// kv_transfer_params keys. The remote_* names and do_remote_* flags are
// vLLM's (NixlConnector); "lease" is Switchyard's addition.
const (
	ParamDoRemotePrefill = "do_remote_prefill"
	ParamDoRemoteDecode  = "do_remote_decode"
	ParamRemoteEngineID  = "remote_engine_id"
	ParamRemoteBlockIDs  = "remote_block_ids"
	ParamRemoteHost      = "remote_host"
	ParamRemotePort      = "remote_port"
	ParamTPSize          = "tp_size"
	ParamLease           = "lease"
)

// ExportTransferParams builds the kv_transfer_params a prefill worker returns
// after leasing blocks. remote_block_ids holds the hashes as decimal strings:
// a uint64 does not survive a JSON float64, and the puller does not trust
// them anyway (see Puller.Pull).
func ExportTransferParams(host string, port int, lease string, hashes []uint64, engineID string) map[string]any {
	ids := make([]string, len(hashes))
	for i, h := range hashes {
		ids[i] = strconv.FormatUint(h, 10)
	}
	return map[string]any{
		ParamDoRemotePrefill: true,
		ParamDoRemoteDecode:  false,
		ParamRemoteEngineID:  engineID,
		ParamRemoteBlockIDs:  ids,
		ParamRemoteHost:      host,
		ParamRemotePort:      port,
		ParamTPSize:          1,
		ParamLease:           lease,
	}
}

// TransferParams is the part of kv_transfer_params the puller uses.
type TransferParams struct {
	Host     string
	Port     int
	Lease    string
	EngineID string
}

// Addr returns host:port.
func (p TransferParams) Addr() string { return net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) }

// ParseTransferParams reads the fields a pull needs from a decoded
// kv_transfer_params dictionary. remote_port may be any JSON number form
// (float64, json.Number, an integer type) or a decimal string.
func ParseTransferParams(params map[string]any) (TransferParams, error) {
	var tp TransferParams
	var ok bool
	if tp.Host, ok = params[ParamRemoteHost].(string); !ok || tp.Host == "" {
		return tp, fmt.Errorf("kvxfer: kv_transfer_params: %s missing or not a string", ParamRemoteHost)
	}
	if tp.Lease, ok = params[ParamLease].(string); !ok || tp.Lease == "" {
		return tp, fmt.Errorf("kvxfer: kv_transfer_params: %s missing or not a string", ParamLease)
	}
	port, err := toInt(params[ParamRemotePort])
	if err != nil || port <= 0 || port > 65535 {
		return tp, fmt.Errorf("kvxfer: kv_transfer_params: %s %v: want a port number", ParamRemotePort, params[ParamRemotePort])
	}
	tp.Port = port
	tp.EngineID, _ = params[ParamRemoteEngineID].(string)
	return tp, nil
}

func toInt(v any) (int, error) {
	switch x := v.(type) {
	case int:
		return x, nil
	case int64:
		return int(x), nil
	case int32:
		return int(x), nil
	case uint16:
		return int(x), nil
	case float64:
		if x != math.Trunc(x) || x < 0 || x > math.MaxInt32 {
			return 0, errors.New("not an integer")
		}
		return int(x), nil
	case json.Number:
		n, err := x.Int64()
		return int(n), err
	case string:
		return strconv.Atoi(x)
	}
	return 0, fmt.Errorf("unexpected type %T", v)
}

// Transfer describes one completed pull, for link measurement.
type Transfer struct {
	FromEngine string // remote_engine_id
	Addr       string
	Bytes      int64
	Blocks     int
	Duration   time.Duration
}

// PullerConfig configures a Puller.
type PullerConfig struct {
	TLS        *tls.Config
	IOTimeout  time.Duration
	BlockBytes int
	// OnTransfer, when set, is called after every successful pull, so the
	// worker can publish the link's measured throughput.
	OnTransfer func(Transfer)
	// Allow, when set, vets every address before it is dialled: params
	// come from a request, and a worker that dials whatever it is told is
	// a port scanner for anyone who can send it one. engineID is
	// remote_engine_id ("" when absent), addr is host:port. nil allows all.
	Allow func(engineID, addr string) error
}

// Puller is the decode side as the engine sees it: given the prefill
// worker's kv_transfer_params, fetch the blocks. It dials a connection per
// pull (a pull moves megabytes; a TCP or TLS handshake is noise next to it)
// so it holds no idle connections. Safe for concurrent use.
type Puller struct {
	cfg PullerConfig
}

// NewPuller returns a Puller.
func NewPuller(cfg PullerConfig) (*Puller, error) {
	if cfg.BlockBytes <= 0 || cfg.BlockBytes%8 != 0 {
		return nil, fmt.Errorf("kvxfer: puller block bytes %d: want a positive multiple of 8", cfg.BlockBytes)
	}
	return &Puller{cfg: cfg}, nil
}

// Pull fetches blockHashes from the worker named by params and calls insert
// for each block once it is verified. The hashes come from the engine, which
// computed them from the prompt itself; remote_block_ids in params are
// ignored, and the server must stream exactly these hashes in this order
// (and may only if they are under the lease), so a mix-up between requests
// can never insert a wrong block. With no hashes it does nothing and leaves
// the lease to expire.
func (p *Puller) Pull(ctx context.Context, params map[string]any, blockHashes []uint64, insert func(hash uint64) error) error {
	if len(blockHashes) == 0 {
		return nil
	}
	tp, err := ParseTransferParams(params)
	if err != nil {
		return err
	}
	if p.cfg.Allow != nil {
		if err := p.cfg.Allow(tp.EngineID, tp.Addr()); err != nil {
			return err
		}
	}
	c, err := Dial(ctx, tp.Addr(), ClientConfig{TLS: p.cfg.TLS, IOTimeout: p.cfg.IOTimeout, BlockBytes: p.cfg.BlockBytes})
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.Pull(ctx, tp.Lease, blockHashes, insert)
	if err != nil {
		return err
	}
	if p.cfg.OnTransfer != nil {
		p.cfg.OnTransfer(Transfer{FromEngine: tp.EngineID, Addr: tp.Addr(), Bytes: st.Bytes, Blocks: st.Blocks, Duration: st.Duration})
	}
	return nil
}
