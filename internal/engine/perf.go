package engine

import (
	"fmt"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// FromEstimator fills the fields of cfg that the performance model knows:
// StepTimer (the estimator itself) when nil, NumBlocks (the KV capacity left
// by GPU memory × utilization − weights − reserve, in blocks of BlockSize)
// when 0, and the descriptive Model, GPU, GPUMemoryBytes, WeightBytes and
// KVBytesPerToken when empty. Other fields are kept.
func FromEstimator(cfg Config, est *perfmodel.Estimator) Config {
	pc := est.Config()
	if cfg.StepTimer == nil {
		cfg.StepTimer = est
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = defaultBlockSize
	}
	if cfg.NumBlocks == 0 && cfg.BlockSize > 0 {
		cfg.NumBlocks = int(est.KVCapacityTokens() / int64(cfg.BlockSize))
	}
	if cfg.Model == "" {
		cfg.Model = pc.Model.Name
	}
	if cfg.GPU == "" {
		cfg.GPU = pc.GPU.Name
		if pc.TP > 1 {
			cfg.GPU = fmt.Sprintf("%d x %s", pc.TP, pc.GPU.Name)
		}
	}
	if cfg.GPUMemoryBytes == 0 {
		cfg.GPUMemoryBytes = pc.GPU.MemoryBytes
	}
	if cfg.WeightBytes == 0 {
		cfg.WeightBytes = est.WeightBytes()
	}
	if cfg.KVBytesPerToken == 0 {
		cfg.KVBytesPerToken = est.KVBytesPerToken()
	}
	if cfg.TP == 0 {
		cfg.TP = pc.TP
	}
	return cfg
}

// PerfConfig builds a performance-model estimator for a catalog model and
// GPU (names as perfmodel.ResolveModel and perfmodel.LookupGPU accept them)
// at the given tensor-parallel degree and memory utilization (0 → 0.9), and
// returns cfg filled from it by FromEstimator.
func PerfConfig(cfg Config, model, gpu string, tp int, memUtil float64) (Config, *perfmodel.Estimator, error) {
	m, err := perfmodel.ResolveModel(model)
	if err != nil {
		return cfg, nil, fmt.Errorf("engine: model: %w", err)
	}
	g, err := perfmodel.LookupGPU(gpu)
	if err != nil {
		return cfg, nil, fmt.Errorf("engine: GPU: %w", err)
	}
	est, err := perfmodel.New(perfmodel.Config{Model: m, GPU: g, TP: tp, MemUtil: memUtil})
	if err != nil {
		return cfg, nil, fmt.Errorf("engine: performance model: %w", err)
	}
	return FromEstimator(cfg, est), est, nil
}
