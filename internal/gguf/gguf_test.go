package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func sampleKVs() []KV {
	return []KV{
		{"general.architecture", "llama"},
		{"u8", uint8(7)}, {"i8", int8(-7)}, {"u16", uint16(700)}, {"i16", int16(-700)},
		{"u32", uint32(70000)}, {"i32", int32(-70000)}, {"f32", float32(1.5)}, {"b", true},
		{"u64", uint64(1 << 40)}, {"i64", int64(-1 << 40)}, {"f64", 2.25},
		{"strings", []string{"a", "", "▁the"}}, {"floats", []float32{-1, 0.5}}, {"ints", []int32{1, -2, 3}},
		{"general.alignment", uint32(64)},
	}
}

func TestWriteThenRead(t *testing.T) {
	tensors := []Tensor{
		{TensorInfo: TensorInfo{Name: "a", Dims: []uint64{3}, Type: F32}, Data: make([]byte, 12)},
		{TensorInfo: TensorInfo{Name: "b", Dims: []uint64{2, 5}, Type: F16}, Data: make([]byte, 20)},
	}
	var buf bytes.Buffer
	if err := Write(&buf, sampleKVs(), tensors); err != nil {
		t.Fatal(err)
	}
	f, err := ReadMetadata(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.KV, sampleKVs()) {
		t.Errorf("metadata read back differs:\n got %#v\nwant %#v", f.KV, sampleKVs())
	}
	if f.Version != Version || f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Errorf("version %d, alignment %d, data offset %d", f.Version, f.Alignment, f.DataOffset)
	}
	want := []TensorInfo{{Name: "a", Dims: []uint64{3}, Type: F32, Offset: 0}, {Name: "b", Dims: []uint64{2, 5}, Type: F16, Offset: 64}}
	if !reflect.DeepEqual(f.Tensors, want) {
		t.Errorf("tensors %+v, want %+v", f.Tensors, want)
	}
	// The data section: each tensor at DataOffset + its offset, the file
	// ending with the last one's padding.
	if got, want := uint64(buf.Len()), f.DataOffset+64+64; got != want {
		t.Errorf("file of %d bytes, want %d", got, want)
	}
	if f.Params() != 13 || f.Architecture() != "llama" {
		t.Errorf("Params %d, Architecture %q", f.Params(), f.Architecture())
	}
	if u, ok := f.Uint("u16"); !ok || u != 700 {
		t.Errorf("Uint(u16) = %d, %v", u, ok)
	}
	if _, ok := f.Uint("i8"); ok {
		t.Errorf("Uint of a negative value is ok")
	}
	if x, ok := f.Float("f32"); !ok || x != 1.5 {
		t.Errorf("Float(f32) = %v, %v", x, ok)
	}
}

// The header is as ggml's docs/gguf.md lays it out, byte for byte.
func TestHeaderBytes(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, []KV{{"k", uint32(5)}}, nil); err != nil {
		t.Fatal(err)
	}
	want := []byte("GGUF")
	want = binary.LittleEndian.AppendUint32(want, 3)
	want = binary.LittleEndian.AppendUint64(want, 0)          // tensors
	want = binary.LittleEndian.AppendUint64(want, 1)          // metadata entries
	want = binary.LittleEndian.AppendUint64(want, 1)          // key length
	want = append(want, 'k')                                  // key
	want = binary.LittleEndian.AppendUint32(want, typeUint32) // value type
	want = binary.LittleEndian.AppendUint32(want, 5)
	want = append(want, make([]byte, 64-len(want))...) // padding to 32
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("bytes\n got %x\nwant %x", buf.Bytes(), want)
	}
}

func TestWriteRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		kvs     []KV
		tensors []Tensor
		want    string
	}{
		"a value of no GGUF type": {kvs: []KV{{"k", 3}}, want: "a int is no GGUF value"},
		"data of the wrong size": {tensors: []Tensor{{TensorInfo: TensorInfo{Name: "t", Dims: []uint64{4}, Type: F32}, Data: make([]byte, 15)}},
			want: "15 bytes of data"},
		"five dimensions": {tensors: []Tensor{{TensorInfo: TensorInfo{Name: "t", Dims: []uint64{1, 1, 1, 1, 1}, Type: F32}, Data: make([]byte, 4)}},
			want: "5 dimensions"},
		"a quantized type": {tensors: []Tensor{{TensorInfo: TensorInfo{Name: "t", Dims: []uint64{32}, Type: 2}, Data: make([]byte, 18)}},
			want: "not type 2"},
		"an odd alignment": {kvs: []KV{{"general.alignment", uint32(12)}}, want: "multiple of 8"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Write(&bytes.Buffer{}, c.kvs, c.tensors)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	var good bytes.Buffer
	if err := Write(&good, sampleKVs(), nil); err != nil {
		t.Fatal(err)
	}
	header := func(version uint32, tensors, kvs uint64) []byte {
		b := append([]byte("GGUF"), binary.LittleEndian.AppendUint32(nil, version)...)
		b = binary.LittleEndian.AppendUint64(b, tensors)
		return binary.LittleEndian.AppendUint64(b, kvs)
	}
	hugeString := binary.LittleEndian.AppendUint64(header(3, 0, 1), 1<<40)
	for name, c := range map[string]struct {
		in   []byte
		want string
	}{
		"not GGUF":           {[]byte("GGML1234"), "not a GGUF file"},
		"empty":              {nil, "not a GGUF file"},
		"version 1":          {header(1, 0, 0), "version 1"},
		"counts over limits": {header(3, 1<<40, 0), "more than the limits"},
		"a huge string":      {hugeString, "more than the limit"},
		"cut short":          {good.Bytes()[:good.Len()/2], "unexpected EOF"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadMetadata(bytes.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	if _, err := ReadMetadata(bytes.NewReader(nil)); !errors.Is(err, ErrNotGGUF) {
		t.Errorf("empty input: %v, want ErrNotGGUF", err)
	}
}

func TestFloat16(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{0, 0x0000}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800},
		{65504, 0x7bff}, {65520, 0x7c00}, {1e6, 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{1.0 / 3, 0x3555},                     // rounded to nearest
		{1 + 1.0/2048, 0x3c00},                // a tie, to even (down)
		{1 + 3.0/2048, 0x3c02},                // a tie, to even (up)
		{float32(math.Ldexp(1, -24)), 0x0001}, // the least subnormal
		{float32(math.Ldexp(1, -14)), 0x0400}, // the least normal
		{float32(math.Ldexp(1, -26)), 0x0000}, // below half the least subnormal
		{float32(math.Ldexp(3, -26)), 0x0001}, // above half of it
	} {
		if got := Float16(c.f); got != c.want {
			t.Errorf("Float16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	if got := Float16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("Float16(NaN) = %#04x, not a NaN", got)
	}
}

// FuzzReadMetadata: any input gives metadata or an error, never a panic
// or memory its counts claim; what it reads writes back to the same
// metadata.
func FuzzReadMetadata(f *testing.F) {
	var buf bytes.Buffer
	if err := Write(&buf, sampleKVs(), []Tensor{{TensorInfo: TensorInfo{Name: "a", Dims: []uint64{2}, Type: F32}, Data: make([]byte, 8)}}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("GGUF"))
	f.Add(append([]byte("GGUF\x03\x00\x00\x00"), make([]byte, 16)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		lim := Limits{KVs: 64, Tensors: 64, String: 1 << 12, Array: 1 << 12, Bytes: 1 << 20}
		file, err := ReadMetadataLimits(bytes.NewReader(in), lim)
		if err != nil {
			return
		}
		if file.DataOffset > uint64(len(in))+file.Alignment {
			t.Fatalf("data offset %d beyond the %d bytes read", file.DataOffset, len(in))
		}
		var out bytes.Buffer
		if err := Write(&out, file.KV, nil); err != nil {
			return // arrays of arrays and alignments Write does not take
		}
		again, err := ReadMetadataLimits(bytes.NewReader(out.Bytes()), DefaultLimits)
		if err != nil {
			t.Fatalf("written back, not read: %v", err)
		}
		if len(again.KV) != len(file.KV) {
			t.Fatalf("%d entries written back as %d", len(file.KV), len(again.KV))
		}
	})
}
