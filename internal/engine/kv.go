package engine

// kvCache is the paged KV cache: numBlocks blocks of blockSize tokens, a
// reference count per block, and a free list kept in eviction order (least
// recently used first). With prefix caching, a full block computed from a
// prompt carries the chained hash of its tokens; freed blocks keep their hash
// and stay findable until they are reused for something else.
type kvCache struct {
	blockSize int
	numBlocks int
	ref       []int32
	hash      []uint64 // 0: no hash
	// The free list is a doubly linked list threaded through prev/next with
	// a sentinel at index numBlocks; head (next of sentinel) is evicted first.
	prev, next []int32
	numFree    int
	cached     map[uint64]int32 // hash → block
	caching    bool
}

func newKVCache(numBlocks, blockSize int, caching bool) *kvCache {
	kv := &kvCache{
		blockSize: blockSize,
		numBlocks: numBlocks,
		ref:       make([]int32, numBlocks),
		hash:      make([]uint64, numBlocks),
		prev:      make([]int32, numBlocks+1),
		next:      make([]int32, numBlocks+1),
		caching:   caching,
	}
	if caching {
		kv.cached = make(map[uint64]int32)
	}
	s := int32(numBlocks)
	kv.prev[s], kv.next[s] = s, s
	for b := range int32(numBlocks) {
		kv.pushTail(b)
	}
	return kv
}

func (kv *kvCache) pushTail(b int32) {
	s := int32(kv.numBlocks)
	last := kv.prev[s]
	kv.prev[b], kv.next[b] = last, s
	kv.next[last] = b
	kv.prev[s] = b
	kv.numFree++
}

func (kv *kvCache) pushHead(b int32) {
	s := int32(kv.numBlocks)
	first := kv.next[s]
	kv.prev[b], kv.next[b] = s, first
	kv.prev[first] = b
	kv.next[s] = b
	kv.numFree++
}

func (kv *kvCache) unlink(b int32) {
	p, n := kv.prev[b], kv.next[b]
	kv.next[p] = n
	kv.prev[n] = p
	kv.numFree--
}

// used is the number of blocks held by at least one request.
func (kv *kvCache) used() int { return kv.numBlocks - kv.numFree }

// blocksFor is the number of blocks that hold n tokens.
func (kv *kvCache) blocksFor(n int) int { return (n + kv.blockSize - 1) / kv.blockSize }

// alloc takes the least recently used free block, dropping its hash. The
// caller has checked numFree.
func (kv *kvCache) alloc() int32 {
	s := int32(kv.numBlocks)
	b := kv.next[s]
	kv.unlink(b)
	if h := kv.hash[b]; h != 0 {
		if kv.cached[h] == b {
			delete(kv.cached, h)
		}
		kv.hash[b] = 0
	}
	kv.ref[b] = 1
	return b
}

// grow appends blocks to table until it holds n tokens; false (and no
// change) when the free blocks do not suffice.
func (kv *kvCache) grow(table *[]int32, n int) bool {
	need := kv.blocksFor(n) - len(*table)
	if need <= 0 {
		return true
	}
	if need > kv.numFree {
		return false
	}
	for range need {
		*table = append(*table, kv.alloc())
	}
	return true
}

// free releases a request's blocks, last block first, so that a prompt's
// head blocks are evicted last. Blocks without a hash go to the head of the
// free list (nothing can reuse them); hashed ones to the tail.
func (kv *kvCache) free(table []int32) {
	for i := len(table) - 1; i >= 0; i-- {
		b := table[i]
		kv.ref[b]--
		if kv.ref[b] == 0 {
			if kv.hash[b] == 0 {
				kv.pushHead(b)
			} else {
				kv.pushTail(b)
			}
		}
	}
}

// lookup returns how many leading hashes are cached (at most limit) and how
// many of those blocks are free (held by no request), which taking them
// would remove from the free pool.
func (kv *kvCache) lookup(hashes []uint64, limit int) (hits, evictable int) {
	if !kv.caching {
		return 0, 0
	}
	for hits < limit && hits < len(hashes) {
		b, ok := kv.cached[hashes[hits]]
		if !ok {
			break
		}
		if kv.ref[b] == 0 {
			evictable++
		}
		hits++
	}
	return hits, evictable
}

// take appends the first hits cached blocks of hashes to table.
func (kv *kvCache) take(table *[]int32, hashes []uint64, hits int) {
	for _, h := range hashes[:hits] {
		b := kv.cached[h]
		if kv.ref[b] == 0 {
			kv.unlink(b)
		}
		kv.ref[b]++
		*table = append(*table, b)
	}
}

// publish gives the blocks table[from:to] the hashes hashes[from:to] once
// their tokens are computed, unless another block already holds that hash.
func (kv *kvCache) publish(table []int32, hashes []uint64, from, to int) {
	if !kv.caching {
		return
	}
	to = min(to, len(hashes), len(table))
	for i := from; i < to; i++ {
		b, h := table[i], hashes[i]
		if kv.hash[b] != 0 {
			continue
		}
		if _, ok := kv.cached[h]; ok {
			continue
		}
		kv.hash[b] = h
		kv.cached[h] = b
	}
}

// resetPrefix drops the hash of every block no request holds, so that no
// later prompt hits it, and returns how many it dropped and how many hashed
// blocks stay because a request holds them.
func (kv *kvCache) resetPrefix() (dropped, held int) {
	if !kv.caching {
		return 0, 0
	}
	for b, h := range kv.hash {
		if h == 0 {
			continue
		}
		if kv.ref[b] > 0 {
			held++
			continue
		}
		if kv.cached[h] == int32(b) {
			delete(kv.cached, h)
		}
		kv.hash[b] = 0
		dropped++
	}
	return dropped, held
}

// blockHashes returns the chained hashes of the full blocks of prompt: each
// hash mixes its parent's hash with the block's token ids. A hash is never 0.
func blockHashes(prompt []int32, blockSize int) []uint64 {
	n := len(prompt) / blockSize
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	h := uint64(0x9e3779b97f4a7c15)
	for i := range n {
		for _, t := range prompt[i*blockSize : (i+1)*blockSize] {
			h ^= uint64(uint32(t))
			h *= 0x100000001b3
		}
		h = mix64(h) | 1
		out[i] = h
	}
	return out
}

// mix64 is the splitmix64 finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
