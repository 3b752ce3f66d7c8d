package perfmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tokentrace/tokentrace/internal/field"
)

// LoadModelConfig reads a Hugging Face config.json (Llama, Mistral, Qwen2,
// Mixtral, DeepSeek-V2/V3 and alike, including MoE and MLA fields; a
// multimodal config's text_config is used when present). A missing or
// mistyped required field is named in the error.
func LoadModelConfig(path string) (ModelSpec, error) {
	data, err := field.ReadFile(path, 0)
	if err != nil {
		return ModelSpec{}, fmt.Errorf("model config: %w", err)
	}
	// A checkpoint's config.json is named for its directory; any other
	// file for itself.
	name := strings.TrimSuffix(filepath.Base(path), ".json")
	if strings.EqualFold(filepath.Base(path), "config.json") {
		if abs, err := filepath.Abs(path); err == nil {
			name = filepath.Base(filepath.Dir(abs))
		}
	}
	m, err := ParseModelConfig(data, name)
	if err != nil {
		return ModelSpec{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ParseModelConfig reads config.json bytes; fallbackName names the model when
// the file has no _name_or_path.
func ParseModelConfig(data []byte, fallbackName string) (ModelSpec, error) {
	raw, err := configObject(data)
	if err != nil {
		return ModelSpec{}, err
	}
	c := cfgReader{raw: raw}
	m := ModelSpec{Name: c.str("_name_or_path")}
	if m.Name == "" {
		m.Name = fallbackName
	}
	if i := strings.LastIndex(m.Name, "/"); i >= 0 && i < len(m.Name)-1 {
		m.Name = m.Name[i+1:]
	}
	m.Layers = c.required("num_hidden_layers", "n_layer", "num_layers")
	m.Hidden = c.required("hidden_size", "n_embd", "d_model")
	m.Heads = c.required("num_attention_heads", "n_head")
	m.Vocab = c.required("vocab_size")
	m.KVHeads = c.optional("num_key_value_heads", "num_kv_heads")
	if c.boolean("multi_query") && m.KVHeads == 0 {
		m.KVHeads = 1
	}
	m.HeadDim = c.optional("head_dim")
	m.TiedEmbeddings = c.boolean("tie_word_embeddings")
	m.MaxContext = c.optional("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
	mt := strings.ToLower(c.str("model_type"))
	m.QKVBias = c.boolean("attention_bias") || c.boolean("qkv_bias") || mt == "qwen2" || mt == "qwen2_moe"

	c.experts(&m)
	c.latentAttention(&m)
	if c.err != nil {
		return ModelSpec{}, c.err
	}
	m.Source = "config.json"
	m.normalize()
	if err := m.Validate(); err != nil {
		return ModelSpec{}, fmt.Errorf("config.json: %w", err)
	}
	return m, nil
}

// configObject decodes config.json's object, numbers kept as written; a
// multimodal config's text_config, when the top level has no layers, with
// the top-level names it lacks.
func configObject(data []byte) (map[string]json.RawMessage, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("config.json is not a JSON object: %w", err)
	}
	if raw == nil {
		return nil, errors.New("config.json is not a JSON object")
	}
	tc, ok := raw["text_config"]
	if !ok {
		return raw, nil
	}
	if _, has := raw["num_hidden_layers"]; has {
		return raw, nil
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(tc, &inner); err != nil || inner == nil {
		return nil, fmt.Errorf("config.json: field \"text_config\" is not an object")
	}
	for k, v := range raw { // keep top-level names (e.g. _name_or_path) the text config lacks
		if _, dup := inner[k]; !dup && k != "text_config" {
			inner[k] = v
		}
	}
	return inner, nil
}

// experts reads the mixture-of-experts sizes and the MLP's intermediate
// size, which a MoE with its own expert size may leave out.
func (c *cfgReader) experts(m *ModelSpec) {
	m.Experts = c.optional("num_local_experts", "n_routed_experts", "num_experts")
	if m.Experts == 0 {
		m.Intermediate = c.required("intermediate_size", "ffn_dim", "n_inner")
		return
	}
	m.ExpertsPerToken = c.required("num_experts_per_tok")
	m.MoEIntermediate = c.optional("moe_intermediate_size")
	m.SharedExperts = c.optional("n_shared_experts")
	m.DenseLayers = c.optional("first_k_dense_replace")
	if s := c.optional("shared_expert_intermediate_size"); s > 0 && m.SharedExperts == 0 && m.MoEIntermediate > 0 {
		m.SharedExperts = max(1, s/m.MoEIntermediate)
	}
	if m.MoEIntermediate == 0 || m.DenseLayers > 0 {
		m.Intermediate = c.required("intermediate_size", "ffn_dim", "n_inner")
	} else {
		m.Intermediate = c.optional("intermediate_size", "ffn_dim", "n_inner")
	}
}

// latentAttention reads multi-head latent attention's ranks and head
// sizes, when kv_lora_rank is set.
func (c *cfgReader) latentAttention(m *ModelSpec) {
	if _, ok := c.raw["kv_lora_rank"]; !ok || c.isNull("kv_lora_rank") {
		return
	}
	m.Attention = AttnMLA
	m.KVLoraRank = c.required("kv_lora_rank")
	m.QLoraRank = c.optional("q_lora_rank")
	m.QKNopeHeadDim = c.required("qk_nope_head_dim")
	m.QKRopeHeadDim = c.required("qk_rope_head_dim")
	m.VHeadDim = c.required("v_head_dim")
	if m.HeadDim == 0 {
		m.HeadDim = m.QKNopeHeadDim + m.QKRopeHeadDim
	}
}

// cfgReader extracts fields, keeping the first error.
type cfgReader struct {
	raw map[string]json.RawMessage
	err error
}

func (c *cfgReader) isNull(k string) bool {
	v, ok := c.raw[k]
	return !ok || string(bytes.TrimSpace(v)) == "null"
}

func (c *cfgReader) lookup(names []string) (string, json.RawMessage, bool) {
	for _, n := range names {
		if !c.isNull(n) {
			return n, c.raw[n], true
		}
	}
	return "", nil, false
}

func (c *cfgReader) toInt(name string, v json.RawMessage) int {
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		c.fail(fmt.Errorf("config.json: field %q must be a number (got %s)", name, truncate(string(v), 40)))
		return 0
	}
	if f != float64(int(f)) || f < 0 || f > 1<<31 {
		c.fail(fmt.Errorf("config.json: field %q must be a non-negative integer (got %s)", name, truncate(string(v), 40)))
		return 0
	}
	return int(f)
}

func (c *cfgReader) required(names ...string) int {
	n, v, ok := c.lookup(names)
	if !ok {
		c.fail(fmt.Errorf("config.json: missing field %q", names[0]))
		return 0
	}
	x := c.toInt(n, v)
	if x == 0 {
		c.fail(fmt.Errorf("config.json: field %q must be > 0", n))
	}
	return x
}

func (c *cfgReader) optional(names ...string) int {
	n, v, ok := c.lookup(names)
	if !ok {
		return 0
	}
	return c.toInt(n, v)
}

func (c *cfgReader) boolean(name string) bool {
	if c.isNull(name) {
		return false
	}
	var b bool
	if err := json.Unmarshal(c.raw[name], &b); err != nil {
		c.fail(fmt.Errorf("config.json: field %q must be true or false", name))
	}
	return b
}

func (c *cfgReader) str(name string) string {
	if c.isNull(name) {
		return ""
	}
	var s string
	if err := json.Unmarshal(c.raw[name], &s); err != nil {
		return ""
	}
	return s
}

func (c *cfgReader) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ResolveModel loads a config.json when nameOrPath ends in .json or names an
// existing file or directory (a directory's config.json is read), and looks
// the name up in the catalog otherwise.
func ResolveModel(nameOrPath string) (ModelSpec, error) {
	if st, err := os.Stat(nameOrPath); err == nil {
		if st.IsDir() {
			return LoadModelConfig(filepath.Join(nameOrPath, "config.json"))
		}
		if strings.EqualFold(filepath.Ext(nameOrPath), ".gguf") {
			return LoadGGUF(nameOrPath)
		}
		return LoadModelConfig(nameOrPath)
	}
	if strings.HasSuffix(strings.ToLower(nameOrPath), ".json") {
		return LoadModelConfig(nameOrPath) // reports the missing file
	}
	return LookupModel(nameOrPath)
}
