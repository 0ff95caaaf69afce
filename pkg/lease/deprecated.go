package lease

import "k8s.io/client-go/kubernetes"

// The old names of the horizon's persistence, kept so that code written
// against them still builds (docs/architecture.md, "one name": horizon).

// Watermark is the old name of HorizonStore.
//
// Deprecated: use HorizonStore.
type Watermark = HorizonStore

// ConfigMapWatermark is the old name of ConfigMapHorizon.
//
// Deprecated: use ConfigMapHorizon.
type ConfigMapWatermark = ConfigMapHorizon

// MemoryWatermark is the old name of MemoryHorizon.
//
// Deprecated: use MemoryHorizon.
type MemoryWatermark = MemoryHorizon

// ErrWatermarkLost is the old name of ErrHorizonLost.
//
// Deprecated: use ErrHorizonLost.
var ErrWatermarkLost = ErrHorizonLost

// DefaultWatermarkStep is the old name of DefaultHorizonStep.
//
// Deprecated: use DefaultHorizonStep.
const DefaultWatermarkStep = DefaultHorizonStep

// NewConfigMapWatermark is the old name of NewConfigMapHorizon.
//
// Deprecated: use NewConfigMapHorizon.
func NewConfigMapWatermark(client kubernetes.Interface, namespace, name, identity string) *ConfigMapHorizon {
	return NewConfigMapHorizon(client, namespace, name, identity)
}
