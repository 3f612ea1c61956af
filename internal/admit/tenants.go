package admit

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"regexp"
	"strconv"

	"github.com/switchyard-llm/switchyard/internal/yamlconf"
)

// DefaultTenant names the tenant of requests that no tenant key names:
// every request when no tenants are configured, and those authorised by
// the deployment's API key or admin key when they are.
const DefaultTenant = "default"

// Tenant is one entry of a tenants file.
type Tenant struct {
	Name string `yaml:"name"`
	// Key is the tenant's API key; KeySHA256 its SHA-256 in hex, for a
	// file that should not hold the key itself. One of them is required.
	Key       string `yaml:"key"`
	KeySHA256 string `yaml:"key_sha256"`
	// Weight is the tenant's share of a contended priority level against
	// the others' weights. Default 1.
	Weight float64 `yaml:"weight"`
	// Limits; 0 means none. Tokens count the prompt and max_tokens.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	TokensPerMinute   int `yaml:"tokens_per_minute"`
	MaxConcurrency    int `yaml:"max_concurrency"`
	// MaxPriority caps the priority the tenant's requests may ask for:
	// critical, standard (default) or sheddable.
	MaxPriority string `yaml:"max_priority"`
	// ShareCache opts the tenant out of prefix-cache isolation: its
	// prompts hash as they would without tenants, so it shares cached
	// prefixes with every other sharing tenant (and can time them).
	ShareCache bool `yaml:"share_cache"`

	maxPriority Priority
	keyHash     [32]byte
}

// Cap lowers p to the tenant's max_priority.
func (t *Tenant) Cap(p Priority) Priority { return min(p, t.maxPriority) }

// CacheSalt is the cache_salt the tenant's request is hashed and sent
// upstream with, given the client's own (maybe empty), and whether it
// differs from the client's. An isolated tenant's salt is an HMAC of the
// client's keyed by the tenant's key hash: no other tenant can produce it
// without the key, so none can reach (or time) its cached prefixes.
func (t *Tenant) CacheSalt(client string) (string, bool) {
	if t.ShareCache || t.Name == DefaultTenant && t.keyHash == [32]byte{} {
		return client, false
	}
	m := hmac.New(sha256.New, t.keyHash[:])
	m.Write([]byte(client))
	return "sy-tenant-" + hex.EncodeToString(m.Sum(nil)[:16]), true
}

// Tenants is a validated tenants file. It is read-only, so safe for
// concurrent use.
type Tenants struct {
	list   []*Tenant
	byName map[string]*Tenant
	dflt   *Tenant
}

// tenantsFile is the file's layout.
type tenantsFile struct {
	Tenants []Tenant `yaml:"tenants"`
}

var tenantNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// LoadTenants reads and validates a tenants file:
//
//	tenants:
//	  - name: alpha
//	    key_sha256: 5e88...   # or key: sk-...
//	    weight: 2
//	    requests_per_minute: 600
//	    tokens_per_minute: 2000000
//	    max_concurrency: 64
//	    max_priority: critical
//
// A problem is a *yamlconf.Error naming the file, line and key.
func LoadTenants(path string) (*Tenants, error) {
	var tf tenantsFile
	f, err := yamlconf.Load(path, &tf)
	if err != nil {
		return nil, err
	}
	seq, _ := yamlconf.Value(f.Root, "tenants")
	if seq == nil || len(tf.Tenants) == 0 {
		return nil, f.Errorf(f.Root, "", "tenants", "list at least one tenant (name, key or key_sha256, weight)")
	}
	ts := &Tenants{byName: map[string]*Tenant{}}
	hashes := map[[32]byte]string{}
	for i := range tf.Tenants {
		t := &tf.Tenants[i]
		n := seq.Content[i]
		path := "tenants[" + strconv.Itoa(i) + "]"
		bad := func(key, format string, args ...any) error { return f.Errorf(n, path, key, format, args...) }
		switch {
		case t.Name == "":
			return nil, bad("name", "every tenant needs a name")
		case !tenantNameRE.MatchString(t.Name):
			return nil, bad("name", "%q: use 1-64 lower-case letters, digits, '.', '_' or '-' (it labels metrics)", t.Name)
		case ts.byName[t.Name] != nil:
			return nil, bad("name", "tenant %q is listed twice", t.Name)
		case t.Name == DefaultTenant:
			return nil, bad("name", "%q names requests authorised by --api-key; pick another name", DefaultTenant)
		}
		switch {
		case t.Key != "" && t.KeySHA256 != "":
			return nil, bad("key_sha256", "give key or key_sha256, not both")
		case t.Key != "":
			t.keyHash = sha256.Sum256([]byte(t.Key))
		case t.KeySHA256 != "":
			b, err := hex.DecodeString(t.KeySHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, bad("key_sha256", "want 64 hex digits (sha256sum of the key)")
			}
			copy(t.keyHash[:], b)
		default:
			return nil, bad("key", "tenant %q needs key or key_sha256", t.Name)
		}
		if other, ok := hashes[t.keyHash]; ok {
			return nil, bad("key", "tenant %q has the same key as %q", t.Name, other)
		}
		hashes[t.keyHash] = t.Name
		if _, set := yamlconf.Value(n, "weight"); set == nil {
			t.Weight = 1
		} else if !(t.Weight > 0 && t.Weight <= 1000) {
			return nil, bad("weight", "%v: want a number in (0, 1000]", t.Weight)
		}
		for _, l := range []struct {
			key string
			v   int
		}{{"requests_per_minute", t.RequestsPerMinute}, {"tokens_per_minute", t.TokensPerMinute}, {"max_concurrency", t.MaxConcurrency}} {
			if l.v < 0 {
				return nil, bad(l.key, "%d: want 0 (no limit) or more", l.v)
			}
		}
		t.maxPriority = Standard
		if t.MaxPriority != "" {
			p, err := ParsePriority(t.MaxPriority)
			if err != nil {
				return nil, bad("max_priority", "%q: want critical, standard or sheddable", t.MaxPriority)
			}
			t.maxPriority = p
		}
		ts.list = append(ts.list, t)
		ts.byName[t.Name] = t
	}
	ts.dflt = defaultTenant()
	return ts, nil
}

func defaultTenant() *Tenant {
	return &Tenant{Name: DefaultTenant, Weight: 1, maxPriority: Critical}
}

// anonymous is the default tenant when no tenants are configured.
var anonymous = defaultTenant()

// ByKey returns the tenant whose key is key, or nil. Every tenant's hash
// is compared, in constant time, so the time taken says nothing of which
// tenant (if any) nearly matched.
func (ts *Tenants) ByKey(key string) *Tenant {
	if ts == nil || key == "" {
		return nil
	}
	h := sha256.Sum256([]byte(key))
	var found *Tenant
	for _, t := range ts.list {
		if subtle.ConstantTimeCompare(h[:], t.keyHash[:]) == 1 {
			found = t
		}
	}
	return found
}

// Default is the tenant of requests no tenant key names: weight 1, no
// limits, any priority.
func (ts *Tenants) Default() *Tenant {
	if ts == nil || ts.dflt == nil {
		return anonymous
	}
	return ts.dflt
}

// List returns the tenants in file order; the caller must not modify them.
func (ts *Tenants) List() []*Tenant {
	if ts == nil {
		return nil
	}
	return ts.list
}
