package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// Version is the format version Write writes and ReadMetadata reads (2
// and 3 differ only in what Write never writes: big-endian files).
const Version = 3

// DefaultAlignment is the tensor data's alignment when the metadata has no
// general.alignment.
const DefaultAlignment = 32

// Metadata value types, as the file numbers them.
const (
	typeUint8   uint32 = 0
	typeInt8    uint32 = 1
	typeUint16  uint32 = 2
	typeInt16   uint32 = 3
	typeUint32  uint32 = 4
	typeInt32   uint32 = 5
	typeFloat32 uint32 = 6
	typeBool    uint32 = 7
	typeString  uint32 = 8
	typeArray   uint32 = 9
	typeUint64  uint32 = 10
	typeInt64   uint32 = 11
	typeFloat64 uint32 = 12
)

// TensorType is a tensor's element type, as GGML numbers it.
type TensorType uint32

// The tensor types Write takes data for; ReadMetadata reads any number.
const (
	F32 TensorType = 0
	F16 TensorType = 1
)

// elemSize is the bytes per element of the types Write takes.
func (t TensorType) elemSize() (int, bool) {
	switch t {
	case F32:
		return 4, true
	case F16:
		return 2, true
	}
	return 0, false
}

func (t TensorType) String() string {
	switch t {
	case F32:
		return "F32"
	case F16:
		return "F16"
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// KV is one metadata entry. Value is one of uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64, or a slice
// of one of them (a GGUF array); ReadMetadata gives arrays of arrays as
// []any.
type KV struct {
	Key   string
	Value any
}

// TensorInfo describes one tensor: its name, its dimensions (the first
// varies fastest, as GGML orders them), its type and its data's offset
// from the start of the data section.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64
}

// Elements is the tensor's element count.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Tensor is a tensor to write: its description (Offset is computed) and
// its data, little-endian elements of its type.
type Tensor struct {
	TensorInfo
	Data []byte
}

// maxDims is GGML's most dimensions a tensor has.
const maxDims = 4

// Write writes a GGUF file: the header, kvs in order, the tensors'
// descriptions, then their data, each aligned to general.alignment (when
// kvs holds it as a uint32) or DefaultAlignment.
func Write(w io.Writer, kvs []KV, tensors []Tensor) error {
	align := uint64(DefaultAlignment)
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.(uint32)
			if !ok || a == 0 || a%8 != 0 {
				return fmt.Errorf("gguf: general.alignment must be a uint32 multiple of 8, got %v", kv.Value)
			}
			align = uint64(a)
		}
	}
	bw := bufio.NewWriter(w)
	e := &encoder{w: bw}
	e.raw([]byte(Magic))
	e.u32(Version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		if err := e.kv(kv); err != nil {
			return err
		}
	}
	var offset uint64
	for i := range tensors {
		t := &tensors[i]
		if err := checkTensor(t); err != nil {
			return err
		}
		t.Offset = offset
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
		offset += pad(uint64(len(t.Data)), align)
	}
	e.zeros(pad(e.n, align) - e.n)
	for _, t := range tensors {
		e.raw(t.Data)
		e.zeros(pad(uint64(len(t.Data)), align) - uint64(len(t.Data)))
	}
	if e.err != nil {
		return fmt.Errorf("gguf: %w", e.err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

func checkTensor(t *Tensor) error {
	size, ok := t.Type.elemSize()
	if !ok {
		return fmt.Errorf("gguf: tensor %s: Write takes F32 and F16 data, not %s", t.Name, t.Type)
	}
	if len(t.Dims) == 0 || len(t.Dims) > maxDims {
		return fmt.Errorf("gguf: tensor %s: %d dimensions, want 1 to %d", t.Name, len(t.Dims), maxDims)
	}
	if want := t.Elements() * uint64(size); uint64(len(t.Data)) != want {
		return fmt.Errorf("gguf: tensor %s: %d bytes of data, its dimensions %v of %s want %d", t.Name, len(t.Data), t.Dims, t.Type, want)
	}
	return nil
}

// pad rounds n up to a multiple of align.
func pad(n, align uint64) uint64 { return (n + align - 1) / align * align }

// encoder writes little-endian values, keeping the first error and the
// bytes written.
type encoder struct {
	w   io.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += uint64(n)
	e.err = err
}

func (e *encoder) zeros(n uint64) {
	var z [64]byte
	for n > 0 {
		k := min(n, uint64(len(z)))
		e.raw(z[:k])
		n -= k
	}
}

func (e *encoder) u8(v uint8)   { e.raw([]byte{v}) }
func (e *encoder) u16(v uint16) { binary.LittleEndian.PutUint16(e.buf[:], v); e.raw(e.buf[:2]) }
func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:], v); e.raw(e.buf[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:], v); e.raw(e.buf[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }

func (e *encoder) kv(kv KV) error {
	t, ok := valueType(kv.Value)
	if !ok {
		return fmt.Errorf("gguf: metadata %s: a %T is no GGUF value", kv.Key, kv.Value)
	}
	e.str(kv.Key)
	e.u32(t)
	e.value(kv.Value)
	return nil
}

// valueType is v's GGUF type; ok is false for a Go type GGUF has none for.
func valueType(v any) (uint32, bool) {
	switch v.(type) {
	case uint8:
		return typeUint8, true
	case int8:
		return typeInt8, true
	case uint16:
		return typeUint16, true
	case int16:
		return typeInt16, true
	case uint32:
		return typeUint32, true
	case int32:
		return typeInt32, true
	case float32:
		return typeFloat32, true
	case bool:
		return typeBool, true
	case string:
		return typeString, true
	case uint64:
		return typeUint64, true
	case int64:
		return typeInt64, true
	case float64:
		return typeFloat64, true
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64, []float64:
		return typeArray, true
	}
	return 0, false
}

// value writes v, whose type valueType knows.
func (e *encoder) value(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		b := uint8(0)
		if x {
			b = 1
		}
		e.u8(b)
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case []uint8:
		array(e, typeUint8, x)
	case []int8:
		array(e, typeInt8, x)
	case []uint16:
		array(e, typeUint16, x)
	case []int16:
		array(e, typeInt16, x)
	case []uint32:
		array(e, typeUint32, x)
	case []int32:
		array(e, typeInt32, x)
	case []float32:
		array(e, typeFloat32, x)
	case []bool:
		array(e, typeBool, x)
	case []string:
		array(e, typeString, x)
	case []uint64:
		array(e, typeUint64, x)
	case []int64:
		array(e, typeInt64, x)
	case []float64:
		array(e, typeFloat64, x)
	}
}

func array[T any](e *encoder, t uint32, xs []T) {
	e.u32(t)
	e.u64(uint64(len(xs)))
	for _, x := range xs {
		e.value(x)
	}
}

// ErrNotGGUF is returned by ReadMetadata for input that does not start
// with Magic.
var ErrNotGGUF = errors.New("gguf: not a GGUF file (no GGUF magic)")
