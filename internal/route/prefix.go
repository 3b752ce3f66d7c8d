package route

// PrefixKey computes prefix affinity's key for one prompt: FNV-1a (64-bit)
// over the first Limit bytes of the prompt's texts in order — a chat
// message's role and its content, or a completion's prompt — each text
// followed by a zero byte, until the limit is reached. The gateway feeds it
// the raw JSON string contents of a request body, the simulator the texts
// it would have sent.
type PrefixKey struct {
	h    uint64
	left int
}

const fnvOffset, fnvPrime = 14695981039346656037, 1099511628211

// NewPrefixKey starts a key over the first limit bytes.
func NewPrefixKey(limit int) PrefixKey { return PrefixKey{h: fnvOffset, left: limit} }

// Full reports whether the limit is reached: further texts change nothing.
func (k *PrefixKey) Full() bool { return k.left <= 0 }

// Add hashes the next text (up to what is left of the limit) and its zero
// byte.
func (k *PrefixKey) Add(text []byte) {
	if k.left <= 0 {
		return
	}
	text = text[:min(len(text), k.left)]
	k.left -= len(text)
	for _, c := range text {
		k.h ^= uint64(c)
		k.h *= fnvPrime
	}
	k.h *= fnvPrime // the zero byte: h ^= 0, h *= prime
}

// AddString is Add for a string.
func (k *PrefixKey) AddString(text string) {
	if k.left <= 0 {
		return
	}
	text = text[:min(len(text), k.left)]
	k.left -= len(text)
	for i := 0; i < len(text); i++ {
		k.h ^= uint64(text[i])
		k.h *= fnvPrime
	}
	k.h *= fnvPrime
}

// Sum is the key.
func (k *PrefixKey) Sum() uint64 { return k.h }
