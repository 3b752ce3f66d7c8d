package perfmodel

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Attention kinds.
const (
	AttnMHA = "mha" // one KV head per query head
	AttnGQA = "gqa" // groups of query heads share a KV head
	AttnMQA = "mqa" // one KV head
	AttnMLA = "mla" // multi-head latent attention (DeepSeek): a compressed latent is cached
)

// ModelSpec is a decoder-only transformer's shape: everything the cost model
// needs. Every MLP is gated (SwiGLU: gate, up and down projections), as in
// all catalog models.
type ModelSpec struct {
	Name         string `yaml:"name" json:"name"`
	Layers       int    `yaml:"layers" json:"layers"`
	Hidden       int    `yaml:"hidden" json:"hidden"`
	Heads        int    `yaml:"heads" json:"heads"`
	KVHeads      int    `yaml:"kv_heads" json:"kv_heads"`
	HeadDim      int    `yaml:"head_dim" json:"head_dim"`
	Intermediate int    `yaml:"intermediate" json:"intermediate"` // dense MLP width
	Vocab        int    `yaml:"vocab" json:"vocab"`
	// TiedEmbeddings: the output projection shares the input embedding.
	TiedEmbeddings bool `yaml:"tied_embeddings" json:"tied_embeddings"`
	// QKVBias: the Q, K and V projections carry biases (Qwen2).
	QKVBias bool `yaml:"qkv_bias" json:"qkv_bias"`

	// Mixture of experts; Experts = 0 for a dense model.
	Experts         int `yaml:"experts" json:"experts"`
	ExpertsPerToken int `yaml:"experts_per_token" json:"experts_per_token"`
	SharedExperts   int `yaml:"shared_experts" json:"shared_experts"`
	// MoEIntermediate is one expert's MLP width (Intermediate when 0).
	MoEIntermediate int `yaml:"moe_intermediate" json:"moe_intermediate"`
	// DenseLayers is how many leading layers use a dense MLP instead of
	// experts (DeepSeek's first_k_dense_replace).
	DenseLayers int `yaml:"dense_layers" json:"dense_layers"`

	// Attention is "mha", "gqa", "mqa" or "mla" (inferred when empty).
	Attention string `yaml:"attention" json:"attention"`
	// Multi-head latent attention (Attention == "mla").
	QLoraRank     int `yaml:"q_lora_rank" json:"q_lora_rank,omitempty"`
	KVLoraRank    int `yaml:"kv_lora_rank" json:"kv_lora_rank,omitempty"`
	QKNopeHeadDim int `yaml:"qk_nope_head_dim" json:"qk_nope_head_dim,omitempty"`
	QKRopeHeadDim int `yaml:"qk_rope_head_dim" json:"qk_rope_head_dim,omitempty"`
	VHeadDim      int `yaml:"v_head_dim" json:"v_head_dim,omitempty"`

	// MaxContext is the longest sequence (prompt + output) the model was
	// trained for: config.json's max_position_embeddings; 0 when unknown.
	// A server's default max_model_len (vLLM's) is this, lowered to what the
	// KV cache holds.
	MaxContext int `yaml:"max_context" json:"max_context,omitempty"`

	Source string `yaml:"source" json:"source,omitempty"`
	// Aliases are other names LookupModel accepts.
	Aliases []string `yaml:"aliases" json:"-"`
}

// normalize fills derived defaults: KV heads, head dim, attention kind, MoE width.
func (m *ModelSpec) normalize() {
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.HeadDim == 0 && m.Heads > 0 {
		m.HeadDim = m.Hidden / m.Heads
	}
	if m.Experts > 0 && m.MoEIntermediate == 0 {
		m.MoEIntermediate = m.Intermediate
	}
	m.Attention = strings.ToLower(m.Attention)
	if m.Attention == "" {
		switch {
		case m.KVLoraRank > 0:
			m.Attention = AttnMLA
		case m.KVHeads == 1:
			m.Attention = AttnMQA
		case m.KVHeads < m.Heads:
			m.Attention = AttnGQA
		default:
			m.Attention = AttnMHA
		}
	}
}

// Validate reports the first field that makes the shape unusable.
func (m ModelSpec) Validate() error {
	name := m.Name
	if name == "" {
		name = "model"
	}
	pos := []struct {
		f string
		v int
	}{{"layers", m.Layers}, {"hidden", m.Hidden}, {"heads", m.Heads}, {"kv_heads", m.KVHeads},
		{"head_dim", m.HeadDim}, {"vocab", m.Vocab}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%s: %s must be > 0 (got %d)", name, p.f, p.v)
		}
	}
	limits := []struct {
		f      string
		v, max int
	}{{"layers", m.Layers, 10_000}, {"hidden", m.Hidden, 1 << 20}, {"heads", m.Heads, 1 << 16}, {"head_dim", m.HeadDim, 1 << 16},
		{"intermediate", m.Intermediate, 1 << 22}, {"moe_intermediate", m.MoEIntermediate, 1 << 22}, {"vocab", m.Vocab, 1 << 24},
		{"experts", m.Experts, 1 << 16}, {"kv_lora_rank", m.KVLoraRank, 1 << 16}, {"q_lora_rank", m.QLoraRank, 1 << 16},
		{"qk_nope_head_dim", m.QKNopeHeadDim, 1 << 16}, {"qk_rope_head_dim", m.QKRopeHeadDim, 1 << 16}, {"v_head_dim", m.VHeadDim, 1 << 16},
		{"max_context", m.MaxContext, MaxLength}}
	for _, l := range limits {
		if l.v > l.max {
			return fmt.Errorf("%s: %s = %d is implausibly large (max %d)", name, l.f, l.v, l.max)
		}
	}
	if m.Experts == 0 || m.DenseLayers > 0 {
		if m.Intermediate <= 0 {
			return fmt.Errorf("%s: intermediate must be > 0 (got %d)", name, m.Intermediate)
		}
	}
	if m.Heads%m.KVHeads != 0 {
		return fmt.Errorf("%s: heads (%d) must be a multiple of kv_heads (%d)", name, m.Heads, m.KVHeads)
	}
	if m.MaxContext < 0 {
		return fmt.Errorf("%s: max_context must be ≥ 0 (got %d)", name, m.MaxContext)
	}
	if m.Experts < 0 || m.ExpertsPerToken < 0 || m.SharedExperts < 0 || m.DenseLayers < 0 {
		return fmt.Errorf("%s: negative expert counts", name)
	}
	if m.Experts > 0 {
		if m.ExpertsPerToken <= 0 || m.ExpertsPerToken > m.Experts {
			return fmt.Errorf("%s: experts_per_token must be in [1, experts=%d] (got %d)", name, m.Experts, m.ExpertsPerToken)
		}
		if m.MoEIntermediate <= 0 {
			return fmt.Errorf("%s: moe_intermediate must be > 0", name)
		}
		if m.DenseLayers >= m.Layers {
			return fmt.Errorf("%s: dense_layers (%d) must be < layers (%d)", name, m.DenseLayers, m.Layers)
		}
	}
	switch m.Attention {
	case AttnMHA, AttnGQA, AttnMQA:
	case AttnMLA:
		if m.KVLoraRank <= 0 || m.QKRopeHeadDim <= 0 || m.QKNopeHeadDim <= 0 || m.VHeadDim <= 0 {
			return fmt.Errorf("%s: mla attention needs kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim and v_head_dim > 0", name)
		}
	default:
		return fmt.Errorf("%s: unknown attention %q (mha, gqa, mqa, mla)", name, m.Attention)
	}
	return nil
}

// Params counts parameters by role. All counts are whole-model (all TP ranks).
type Params struct {
	Embedding int64 `json:"embedding"` // input embedding table
	LMHead    int64 `json:"lm_head"`   // output projection (0 when tied: the embedding is reused)
	Attention int64 `json:"attention"` // all layers' attention projections (+ biases)
	DenseMLP  int64 `json:"dense_mlp"` // all dense MLP layers
	// Expert is one routed expert's parameters in one layer.
	Expert int64 `json:"expert"`
	// RoutedExperts is all routed experts of all MoE layers.
	RoutedExperts int64 `json:"routed_experts"`
	// SharedMoE is the always-active part of all MoE layers: shared experts and routers.
	SharedMoE int64 `json:"shared_moe"`
	Norms     int64 `json:"norms"`
}

// Total is every parameter stored.
func (p Params) Total() int64 {
	return p.Embedding + p.LMHead + p.Attention + p.DenseMLP + p.RoutedExperts + p.SharedMoE + p.Norms
}

// ParamCounts counts m's parameters.
func (m ModelSpec) ParamCounts() Params {
	h := int64(m.Hidden)
	var p Params
	p.Embedding = int64(m.Vocab) * h
	if !m.TiedEmbeddings {
		p.LMHead = int64(m.Vocab) * h
	}
	var attn int64
	if m.Attention == AttnMLA {
		qk := int64(m.QKNopeHeadDim + m.QKRopeHeadDim)
		heads := int64(m.Heads)
		if m.QLoraRank > 0 {
			attn += h*int64(m.QLoraRank) + int64(m.QLoraRank) + int64(m.QLoraRank)*heads*qk // q_a, q_a norm, q_b
		} else {
			attn += h * heads * qk
		}
		attn += h*int64(m.KVLoraRank+m.QKRopeHeadDim) + int64(m.KVLoraRank) // kv_a, kv_a norm
		attn += int64(m.KVLoraRank) * heads * int64(m.QKNopeHeadDim+m.VHeadDim)
		attn += heads * int64(m.VHeadDim) * h
	} else {
		q := int64(m.Heads * m.HeadDim)
		kv := int64(m.KVHeads * m.HeadDim)
		attn = h*q + 2*h*kv + q*h
		if m.QKVBias {
			attn += q + 2*kv
		}
	}
	p.Attention = attn * int64(m.Layers)
	p.Norms = int64(2*m.Layers+1) * h
	if m.Experts == 0 {
		p.DenseMLP = 3 * h * int64(m.Intermediate) * int64(m.Layers)
		return p
	}
	moeLayers := int64(m.Layers - m.DenseLayers)
	p.DenseMLP = 3 * h * int64(m.Intermediate) * int64(m.DenseLayers)
	p.Expert = 3 * h * int64(m.MoEIntermediate)
	p.RoutedExperts = p.Expert * int64(m.Experts) * moeLayers
	p.SharedMoE = (p.Expert*int64(m.SharedExperts) + h*int64(m.Experts)) * moeLayers
	return p
}

// TotalParams is every parameter stored.
func (m ModelSpec) TotalParams() int64 { return m.ParamCounts().Total() }

// ActiveParams is the parameters one token's forward pass multiplies by,
// excluding the input embedding (a table lookup, not a matmul) and counting
// ExpertsPerToken routed experts per MoE layer.
func (m ModelSpec) ActiveParams() int64 {
	p := m.ParamCounts()
	head := p.LMHead
	if m.TiedEmbeddings {
		head = p.Embedding
	}
	act := head + p.Attention + p.DenseMLP + p.SharedMoE + p.Norms
	if m.Experts > 0 {
		act += p.Expert * int64(m.ExpertsPerToken) * int64(m.Layers-m.DenseLayers)
	}
	return act
}

// kvElemsPerTokenLayer is the cached elements per token per layer for the
// whole model (before tensor-parallel replication).
func (m ModelSpec) kvElemsPerTokenLayer() int64 {
	if m.Attention == AttnMLA {
		return int64(m.KVLoraRank + m.QKRopeHeadDim)
	}
	return 2 * int64(m.KVHeads*m.HeadDim)
}

// attnFLOPsPerPair is the attention FLOPs per layer for one (query token,
// cached token) pair: QKᵀ and softmax·V, 2 FLOPs per multiply-add.
func (m ModelSpec) attnFLOPsPerPair() float64 {
	if m.Attention == AttnMLA {
		return 2 * float64(m.Heads) * float64(m.QKNopeHeadDim+m.QKRopeHeadDim+m.VHeadDim)
	}
	return 4 * float64(m.Heads*m.HeadDim)
}

//go:embed models.yaml
var modelsYAML []byte

// ParseModelCatalog reads a model catalog in the schema of the embedded
// models.yaml.
func ParseModelCatalog(data []byte) ([]ModelSpec, error) {
	var ms []ModelSpec
	if err := unmarshalYAML(data, &ms); err != nil {
		return nil, fmt.Errorf("model catalog: %w", err)
	}
	if len(ms) == 0 {
		return nil, errors.New("model catalog: no models")
	}
	for i := range ms {
		ms[i].normalize()
		if err := ms[i].Validate(); err != nil {
			return nil, fmt.Errorf("model catalog: %w", err)
		}
	}
	return ms, nil
}

type modelCatalog struct {
	models []ModelSpec
	index  map[string]int
}

var builtinModels = sync.OnceValues(func() (*modelCatalog, error) {
	ms, err := ParseModelCatalog(modelsYAML)
	if err != nil {
		return nil, err
	}
	c := &modelCatalog{models: ms, index: map[string]int{}}
	for i, m := range ms {
		for _, a := range m.Aliases {
			c.index[normName(a)] = i
		}
	}
	for i, m := range ms {
		c.index[normName(m.Name)] = i
	}
	return c, nil
})

func modelsCatalog() *modelCatalog {
	c, err := builtinModels()
	if err != nil {
		panic("perfmodel: embedded models.yaml is invalid: " + err.Error()) // caught by TestBuiltinCatalogs
	}
	return c
}

// Models returns the embedded model catalog in catalog order.
func Models() []ModelSpec { return append([]ModelSpec(nil), modelsCatalog().models...) }

// ModelNames lists the embedded catalog's model names.
func ModelNames() []string {
	ms := modelsCatalog().models
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// LookupModel finds a model in the embedded catalog by name or alias
// (case- and separator-insensitive; an "-Instruct" suffix or an org prefix
// such as "meta-llama/" is ignored). An unknown name gives an
// *UnknownNameError listing the known names and the nearest one.
func LookupModel(name string) (ModelSpec, error) {
	c := modelsCatalog()
	n := name
	if i := strings.LastIndex(n, "/"); i >= 0 {
		n = n[i+1:]
	}
	for _, cand := range []string{n, strings.TrimSuffix(strings.ToLower(n), "-instruct"), strings.TrimSuffix(strings.ToLower(n), "-chat")} {
		if i, ok := c.index[normName(cand)]; ok {
			return c.models[i], nil
		}
	}
	known := ModelNames()
	return ModelSpec{}, &UnknownNameError{Kind: "model", Name: name, Known: known, Nearest: nearest(n, known)}
}
