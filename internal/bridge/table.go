package bridge

import "math/bits"

// table maps engine block hashes to Switchyard hashes: open addressing with
// linear probing and backward-shift deletion, 16 bytes a slot, grown by
// half when 7/8 full, with its capacity any integer (slots are found by
// multiply-shift, not a power-of-two mask). A Go map of the same entries
// takes 2 to 4 times the memory at 1M blocks, depending on where its
// power-of-two growth falls. The key 0 marks an empty slot; a zero engine
// hash is kept beside the slots. Not safe for concurrent use.
type table struct {
	slots   []slot
	n       int // keys in slots
	hasZero bool
	zeroVal uint64
}

type slot struct{ k, v uint64 }

func (t *table) home(k uint64) int {
	// splitmix64's finaliser spreads engine hashes that differ little.
	k ^= k >> 30
	k *= 0xbf58476d1ce4e5b9
	k ^= k >> 27
	k *= 0x94d049bb133111eb
	k ^= k >> 31
	hi, _ := bits.Mul64(k, uint64(len(t.slots)))
	return int(hi)
}

// Len is the number of keys.
func (t *table) Len() int {
	if t.hasZero {
		return t.n + 1
	}
	return t.n
}

func (t *table) Get(k uint64) (uint64, bool) {
	if k == 0 {
		return t.zeroVal, t.hasZero
	}
	if len(t.slots) == 0 {
		return 0, false
	}
	for i := t.home(k); ; {
		switch t.slots[i].k {
		case k:
			return t.slots[i].v, true
		case 0:
			return 0, false
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

func (t *table) Put(k, v uint64) {
	if k == 0 {
		t.hasZero, t.zeroVal = true, v
		return
	}
	if (t.n+1)*8 > len(t.slots)*7 {
		t.grow()
	}
	for i := t.home(k); ; {
		switch t.slots[i].k {
		case k:
			t.slots[i].v = v
			return
		case 0:
			t.slots[i] = slot{k, v}
			t.n++
			return
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, max(64, len(old)+len(old)/2))
	t.n = 0
	for _, s := range old {
		if s.k != 0 {
			t.Put(s.k, s.v)
		}
	}
}

func (t *table) Delete(k uint64) {
	if k == 0 {
		t.hasZero, t.zeroVal = false, 0
		return
	}
	if len(t.slots) == 0 {
		return
	}
	i := t.home(k)
	for t.slots[i].k != k {
		if t.slots[i].k == 0 {
			return
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	// Backward shift: pull later keys of the run into the hole when the
	// hole lies on their way from home.
	n := len(t.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		s := t.slots[j]
		if s.k == 0 {
			break
		}
		h := t.home(s.k)
		// s may move to i if i is cyclically in [h, j).
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

// Reserve sizes the table for n keys without growing, if it is smaller.
func (t *table) Reserve(n int) {
	want := n*8/7 + 1
	if want <= len(t.slots) {
		return
	}
	old := t.slots
	t.slots = make([]slot, want)
	t.n = 0
	for _, s := range old {
		if s.k != 0 {
			t.Put(s.k, s.v)
		}
	}
}

// Range calls fn for every key and value.
func (t *table) Range(fn func(k, v uint64)) {
	if t.hasZero {
		fn(0, t.zeroVal)
	}
	for _, s := range t.slots {
		if s.k != 0 {
			fn(s.k, s.v)
		}
	}
}

// Reset drops every key, keeping the storage.
func (t *table) Reset() {
	clear(t.slots)
	t.n, t.hasZero, t.zeroVal = 0, false, 0
}
