package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
)

// Limits bound what ReadMetadata reads, so that a damaged or hostile file
// costs an error, not the memory its counts claim.
type Limits struct {
	// KVs and Tensors bound the header's counts.
	KVs, Tensors uint64
	// String bounds one string's bytes; Array one array's elements.
	String, Array uint64
	// Bytes bounds the whole header, metadata and tensor descriptions.
	Bytes uint64
}

// DefaultLimits fit every model GGML's engines load: vocabularies of a few
// hundred thousand tokens and merges, chat templates of tens of kilobytes.
var DefaultLimits = Limits{KVs: 1 << 16, Tensors: 1 << 20, String: 1 << 24, Array: 1 << 24, Bytes: 1 << 30}

// File is a GGUF file's metadata and tensor descriptions.
type File struct {
	Version uint32
	KV      []KV
	Tensors []TensorInfo
	// Alignment is the data's alignment; DataOffset where the data
	// section starts, from the file's start.
	Alignment  uint64
	DataOffset uint64
}

// ReadMetadata reads a GGUF file's header, metadata and tensor
// descriptions from r (never the tensor data) within DefaultLimits.
func ReadMetadata(r io.Reader) (*File, error) {
	return ReadMetadataLimits(r, DefaultLimits)
}

// ReadMetadataLimits is ReadMetadata within lim.
func ReadMetadataLimits(r io.Reader, lim Limits) (*File, error) {
	d := &decoder{r: bufio.NewReader(io.LimitReader(r, int64(min(lim.Bytes, math.MaxInt64)))), lim: lim}
	magic := d.bytes(4)
	if d.err != nil || string(magic) != Magic {
		if d.err != nil && !errors.Is(d.err, io.EOF) && !errors.Is(d.err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("gguf: %w", d.err)
		}
		return nil, ErrNotGGUF
	}
	f := &File{Version: d.u32(), Alignment: DefaultAlignment}
	if d.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("gguf: version %d: this reader reads versions 2 and 3", f.Version)
	}
	nt, nkv := d.u64(), d.u64()
	if d.err == nil && (nt > lim.Tensors || nkv > lim.KVs) {
		return nil, fmt.Errorf("gguf: %d tensors and %d metadata entries: more than the limits (%d, %d)", nt, nkv, lim.Tensors, lim.KVs)
	}
	for i := uint64(0); i < nkv && d.err == nil; i++ {
		key := d.str()
		v := d.value(d.u32(), 0)
		if d.err != nil {
			return nil, fmt.Errorf("gguf: metadata entry %d (%q): %w", i, key, d.err)
		}
		f.KV = append(f.KV, KV{Key: key, Value: v})
		if key == "general.alignment" {
			a, ok := v.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return nil, fmt.Errorf("gguf: general.alignment %v: want a power of two as a uint32", v)
			}
			f.Alignment = uint64(a)
		}
	}
	for i := uint64(0); i < nt && d.err == nil; i++ {
		t, err := d.tensor()
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %d: %w", i, err)
		}
		f.Tensors = append(f.Tensors, t)
	}
	if d.err != nil {
		return nil, fmt.Errorf("gguf: %w", d.err)
	}
	f.DataOffset = pad(d.n, f.Alignment)
	return f, nil
}

func (d *decoder) tensor() (TensorInfo, error) {
	t := TensorInfo{Name: d.str()}
	n := d.u32()
	if d.err == nil && (n == 0 || n > maxDims) {
		return t, fmt.Errorf("%s: %d dimensions, want 1 to %d", t.Name, n, maxDims)
	}
	elems := uint64(1)
	for j := uint32(0); j < n && d.err == nil; j++ {
		dim := d.u64()
		hi, lo := bits.Mul64(elems, dim)
		if hi != 0 {
			return t, fmt.Errorf("%s: dimensions overflow", t.Name)
		}
		elems = lo
		t.Dims = append(t.Dims, dim)
	}
	t.Type, t.Offset = TensorType(d.u32()), d.u64()
	return t, d.err
}

// decoder reads little-endian values, keeping the first error and the
// bytes read.
type decoder struct {
	r   *bufio.Reader
	lim Limits
	n   uint64
	err error
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	// Read in pieces: a claimed length costs memory only as its bytes come.
	var out []byte
	for n > 0 && d.err == nil {
		k := min(n, 1<<16)
		start := len(out)
		out = append(out, make([]byte, k)...)
		_, d.err = io.ReadFull(d.r, out[start:])
		n -= k
	}
	if errors.Is(d.err, io.EOF) {
		d.err = io.ErrUnexpectedEOF
	}
	d.n += uint64(len(out))
	return out
}

func (d *decoder) u8() uint8 {
	if b := d.bytes(1); d.err == nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.bytes(2); d.err == nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); d.err == nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); d.err == nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) str() string {
	n := d.u64()
	if d.err == nil && n > d.lim.String {
		d.err = fmt.Errorf("a string of %d bytes: more than the limit (%d)", n, d.lim.String)
	}
	return string(d.bytes(n))
}

// maxNesting bounds arrays of arrays.
const maxNesting = 4

// value reads a value of type t.
func (d *decoder) value(t uint32, depth int) any {
	if d.err != nil {
		return nil
	}
	switch t {
	case typeUint8:
		return d.u8()
	case typeInt8:
		return int8(d.u8())
	case typeUint16:
		return d.u16()
	case typeInt16:
		return int16(d.u16())
	case typeUint32:
		return d.u32()
	case typeInt32:
		return int32(d.u32())
	case typeFloat32:
		return math.Float32frombits(d.u32())
	case typeBool:
		b := d.u8()
		if d.err == nil && b > 1 {
			d.err = fmt.Errorf("a bool of value %d", b)
		}
		return b == 1
	case typeString:
		return d.str()
	case typeUint64:
		return d.u64()
	case typeInt64:
		return int64(d.u64())
	case typeFloat64:
		return math.Float64frombits(d.u64())
	case typeArray:
		return d.array(depth)
	}
	d.err = fmt.Errorf("unknown value type %d", t)
	return nil
}

func (d *decoder) array(depth int) any {
	et, n := d.u32(), d.u64()
	if d.err != nil {
		return nil
	}
	if n > d.lim.Array {
		d.err = fmt.Errorf("an array of %d elements: more than the limit (%d)", n, d.lim.Array)
		return nil
	}
	if et == typeArray && depth >= maxNesting {
		d.err = fmt.Errorf("arrays nested more than %d deep", maxNesting)
		return nil
	}
	switch et {
	case typeUint8:
		return readArray(d, n, d.u8)
	case typeInt8:
		return readArray(d, n, func() int8 { return int8(d.u8()) })
	case typeUint16:
		return readArray(d, n, d.u16)
	case typeInt16:
		return readArray(d, n, func() int16 { return int16(d.u16()) })
	case typeUint32:
		return readArray(d, n, d.u32)
	case typeInt32:
		return readArray(d, n, func() int32 { return int32(d.u32()) })
	case typeFloat32:
		return readArray(d, n, func() float32 { return math.Float32frombits(d.u32()) })
	case typeBool:
		return readArray(d, n, func() bool { return d.value(typeBool, depth) == true })
	case typeString:
		return readArray(d, n, d.str)
	case typeUint64:
		return readArray(d, n, d.u64)
	case typeInt64:
		return readArray(d, n, func() int64 { return int64(d.u64()) })
	case typeFloat64:
		return readArray(d, n, func() float64 { return math.Float64frombits(d.u64()) })
	case typeArray:
		return readArray(d, n, func() any { return d.array(depth + 1) })
	}
	d.err = fmt.Errorf("an array of unknown value type %d", et)
	return nil
}

// readArray reads n elements with next, growing as they come (never by
// the claimed count).
func readArray[T any](d *decoder, n uint64, next func() T) []T {
	out := []T{}
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, next())
	}
	return out
}

// Get is the value of key.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// String is key's value when it is a string.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Get(key)
	s, ok := v.(string)
	return s, ok
}

// Uint is key's value when it is an integer of any width and not
// negative.
func (f *File) Uint(key string) (uint64, bool) {
	v, _ := f.Get(key)
	switch x := v.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// Float is key's value when it is a float or an integer.
func (f *File) Float(key string) (float64, bool) {
	v, _ := f.Get(key)
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if u, ok := f.Uint(key); ok {
		return float64(u), true
	}
	return 0, false
}

// Architecture is general.architecture ("" when absent).
func (f *File) Architecture() string {
	s, _ := f.String("general.architecture")
	return s
}

// ArchUint is the architecture's key name (llama.block_count for "block_count"
// in a llama model).
func (f *File) ArchUint(name string) (uint64, bool) {
	return f.Uint(f.Architecture() + "." + name)
}

// Params is the total element count of the tensors: the model's
// parameters.
func (f *File) Params() uint64 {
	var n uint64
	for _, t := range f.Tensors {
		n += t.Elements()
	}
	return n
}
